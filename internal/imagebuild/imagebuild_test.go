package imagebuild

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The repository's Dockerfile is what scripts/image.sh builds from: these
// are the facts the DaemonSet and docs/install.md rely on.
func TestRepositoryDockerfile(t *testing.T) {
	s, err := ParseFile("../../Dockerfile", map[string]string{"VERSION": "v9", "TARGETOS": "linux", "TARGETARCH": "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Suite != "bookworm" || !s.Slim {
		t.Errorf("base %q: suite %q slim %t, want bookworm slim", s.Base, s.Suite, s.Slim)
	}
	if !slices.Equal(s.Packages, []string{"iptables"}) {
		t.Errorf("packages %q, want [iptables]", s.Packages)
	}
	if len(s.Copies) != 1 || s.Copies[0] != (Copy{Src: "/out/nodedns", Dst: "/nodedns"}) {
		t.Errorf("copies %+v", s.Copies)
	}
	if !slices.Equal(s.Entrypoint, []string{"/nodedns"}) || s.User != "0:0" {
		t.Errorf("entrypoint %q user %q", s.Entrypoint, s.User)
	}
	if !slices.Equal(s.Cmd, []string{"serve", "--config=/etc/nodedns/config.yaml"}) {
		t.Errorf("cmd %q", s.Cmd)
	}
	for _, e := range []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"} {
		if !slices.Contains(s.Build.Env, e) {
			t.Errorf("build env %q lacks %s", s.Build.Env, e)
		}
	}
	if s.Arch() != "arm64" {
		t.Errorf("arch %q, want arm64 (TARGETARCH)", s.Arch())
	}
	want := []string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=v9", "-o", "/out/nodedns", "./cmd/nodedns"}
	if !slices.Equal(s.Build.Args, want) {
		t.Errorf("go %q, want go %q", s.Build.Args, want)
	}
}

func TestParseRefusesWhatItCannotReproduce(t *testing.T) {
	for name, df := range map[string]string{
		"unknown instruction": "FROM golang AS b\nRUN go build -o /out/x .\nFROM debian:bookworm\nHEALTHCHECK CMD true\n",
		"unknown command":     "FROM golang AS b\nRUN go build -o /out/x .\nFROM debian:bookworm\nRUN curl -o /x http://example\n",
		"shell syntax":        "FROM golang AS b\nRUN go build -o /out/x . ; echo\nFROM debian:bookworm\n",
		"undeclared arg":      "FROM golang AS b\nRUN go build -ldflags \"-X main.v=$NOPE\" -o /out/x .\nFROM debian:bookworm\n",
		"not debian":          "FROM golang AS b\nRUN go build -o /out/x .\nFROM alpine:3\nCOPY --from=b /out/x /x\n",
		"shell form":          "FROM golang AS b\nRUN go build -o /out/x .\nFROM debian:bookworm\nCOPY --from=b /out/x /x\nENTRYPOINT /x\n",
		"no go build":         "FROM debian:bookworm\n",
		"apt option":          "FROM golang AS b\nRUN go build -o /out/x .\nFROM debian:bookworm\nRUN apt-get install -y --allow-downgrades x\n",
	} {
		if _, err := Parse(strings.NewReader(df), nil); err == nil {
			t.Errorf("%s: parsed without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestParseContinuationsAndArgs(t *testing.T) {
	df := `# comment
ARG BASE=debian:bookworm-slim
FROM --platform=$BUILDPLATFORM golang:1 AS build
ARG V=dev
RUN CGO_ENABLED=0 \
    # a comment inside
    go build -ldflags "-X 'main.v=${V}'" -o /out/a ./cmd/a
FROM ${BASE}
RUN apt-get update && apt-get install -y --no-install-recommends \
      iptables conntrack && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/a /usr/local/bin/a
ENV A=1 B=2
LABEL org.opencontainers.image.title="a b"
ENTRYPOINT ["/usr/local/bin/a"]
`
	s, err := Parse(strings.NewReader(df), map[string]string{"V": "x1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Build.Args; !slices.Equal(got, []string{"build", "-ldflags", "-X 'main.v=x1'", "-o", "/out/a", "./cmd/a"}) {
		t.Errorf("go %q", got)
	}
	if !slices.Equal(s.Packages, []string{"iptables", "conntrack"}) {
		t.Errorf("packages %q", s.Packages)
	}
	if !slices.Equal(s.Env, []string{"A=1", "B=2"}) || s.Labels["org.opencontainers.image.title"] != "a b" {
		t.Errorf("env %q labels %q", s.Env, s.Labels)
	}
}

// TestBuildAndVerify builds a tiny program the way a Dockerfile says,
// writes the image and checks Verify accepts it and catches drift.
func TestBuildAndVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/hello\n\ngo 1.22\n")
	write("main.go", "package main\n\nvar version = \"dev\"\n\nfunc main() { println(version) }\n")
	df := `FROM --platform=$BUILDPLATFORM golang:1 AS build
WORKDIR /src
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/hello .
FROM debian:bookworm-slim
RUN apt-get install -y fake
COPY --from=build /out/hello /hello
USER 0:0
ENTRYPOINT ["/hello"]
CMD ["run"]
`
	write("Dockerfile", df)
	spec, err := ParseFile(filepath.Join(dir, "Dockerfile"), map[string]string{"VERSION": "v1.0.0-first"})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	files, err := spec.RunBuild(context.Background(), dir, out)
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(out, "rootfs.tar")
	writeTar(t, rootfs, map[string]string{"./usr/sbin/fake": "#!/bin/sh\n"})
	archive := filepath.Join(out, "image.tar")
	if err := WriteArchive(archive, FromSpec(spec, "localhost/hello:v1", rootfs, files)); err != nil {
		t.Fatal(err)
	}
	if err := Verify(spec, archive, []string{"/usr/sbin/fake"}); err != nil {
		t.Fatalf("the image built from the Dockerfile does not verify: %v", err)
	}

	// Drift: another version stamped, another entrypoint, a missing file.
	other, err := Parse(strings.NewReader(strings.Replace(df, `["/hello"]`, `["/hello", "-x"]`, 1)), map[string]string{"VERSION": "v2.0.0-second"})
	if err != nil {
		t.Fatal(err)
	}
	err = Verify(other, archive, []string{"/usr/sbin/iptables-legacy"})
	if err == nil {
		t.Fatal("an image that differs from the Dockerfile verified")
	}
	for _, want := range []string{"entrypoint", `value "v2.0.0-second" not in the binary`, "iptables-legacy missing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("drift report lacks %q:\n%v", want, err)
		}
	}
}

func writeTar(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
