package imagebuild

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// Verify checks that the docker archive at archive is the image spec
// describes: the same entrypoint, command and user; every file the final
// stage copies present; each Go binary among them built with the build
// stage's environment and flags (read from the binary's build info); and
// each of wantFiles (paths the packages must provide) present in some
// layer. It returns one error listing every difference.
func Verify(spec *Spec, archive string, wantFiles []string) error {
	var problems []string
	user, entrypoint, cmd, _, err := ReadConfig(archive)
	if err != nil {
		return err
	}
	if user != spec.User {
		problems = append(problems, fmt.Sprintf("user %q, Dockerfile says %q", user, spec.User))
	}
	if !slices.Equal(entrypoint, spec.Entrypoint) {
		problems = append(problems, fmt.Sprintf("entrypoint %q, Dockerfile says %q", entrypoint, spec.Entrypoint))
	}
	if !slices.Equal(cmd, spec.Cmd) {
		problems = append(problems, fmt.Sprintf("cmd %q, Dockerfile says %q", cmd, spec.Cmd))
	}

	copied := map[string]bool{}
	for _, c := range spec.Copies {
		copied[strings.TrimPrefix(path.Clean(c.Dst), "/")] = true
	}
	present := map[string]bool{}
	tmp, err := os.MkdirTemp("", "imagebuild-verify-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	err = eachLayerEntry(archive, func(name string, h *tar.Header, r io.Reader) error {
		present[name] = true
		if !copied[name] || h.Typeflag != tar.TypeReg {
			return nil
		}
		local := path.Join(tmp, path.Base(name))
		f, err := os.Create(local)
		if err != nil {
			return fmt.Errorf("extracting %s: %w", name, err)
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return fmt.Errorf("extracting %s: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("extracting %s: %w", name, err)
		}
		problems = append(problems, checkGoBinary("/"+name, local, spec.Build)...)
		return nil
	})
	if err != nil {
		return err
	}
	for name := range copied {
		if !present[name] {
			problems = append(problems, fmt.Sprintf("/%s (COPY --from) missing", name))
		}
	}
	for _, w := range wantFiles {
		if !present[strings.TrimPrefix(path.Clean(w), "/")] {
			problems = append(problems, fmt.Sprintf("%s missing (packages %s)", w, strings.Join(spec.Packages, ",")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("image %s differs from the Dockerfile:\n  %s", archive, strings.Join(problems, "\n  "))
	}
	return nil
}

// checkGoBinary compares a Go binary's recorded build settings with the
// Dockerfile's go build.
func checkGoBinary(name, local string, b GoBuild) []string {
	bi, err := buildinfo.ReadFile(local)
	if err != nil {
		return []string{fmt.Sprintf("%s: not a Go binary with build info: %v", name, err)}
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var out []string
	want := func(key, val string) {
		if settings[key] != val {
			out = append(out, fmt.Sprintf("%s: build setting %s=%q, Dockerfile says %q", name, key, settings[key], val))
		}
	}
	for _, kv := range b.Env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "CGO_ENABLED", "GOOS", "GOARCH":
			want(k, v)
		}
	}
	for i := 0; i < len(b.Args); i++ {
		switch a := b.Args[i]; {
		case a == "-trimpath":
			want("-trimpath", "true")
		case a == "-ldflags" && i+1 < len(b.Args):
			if _, recorded := settings["-ldflags"]; recorded || !slices.Contains(b.Args, "-trimpath") {
				want("-ldflags", b.Args[i+1])
			} else {
				// -trimpath keeps -ldflags out of the build info (it may
				// hold paths): check what the flags leave in the binary.
				out = append(out, checkLdflags(name, local, b.Args[i+1])...)
			}
			i++
		case a == "-tags" && i+1 < len(b.Args):
			want("-tags", b.Args[i+1])
			i++
		}
	}
	return out
}

// checkLdflags checks the effects of -s (no symbol table) and of each
// -X name=value (the value is in the binary) on a binary whose build info
// does not record its -ldflags.
func checkLdflags(name, local, ldflags string) []string {
	var out []string
	words, err := shellWords(ldflags)
	if err != nil {
		return []string{fmt.Sprintf("%s: -ldflags %q: %v", name, ldflags, err)}
	}
	body, err := os.ReadFile(local)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	for i := 0; i < len(words); i++ {
		switch words[i] {
		case "-s":
			f, err := elf.Open(local)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: not ELF: %v", name, err))
				continue
			}
			if f.Section(".symtab") != nil {
				out = append(out, fmt.Sprintf("%s: has a symbol table, the Dockerfile links with -s", name))
			}
			f.Close()
		case "-X":
			if i+1 < len(words) {
				_, val, _ := strings.Cut(words[i+1], "=")
				if val != "" && !bytes.Contains(body, []byte(val)) {
					out = append(out, fmt.Sprintf("%s: -X %s: value %q not in the binary", name, words[i+1], val))
				}
				i++
			}
		}
	}
	return out
}

// eachLayerEntry calls fn for every entry of every layer of a docker
// archive, with the entry's path relative to the image root.
func eachLayerEntry(archive string, fn func(name string, h *tar.Header, r io.Reader) error) error {
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("opening image archive: %w", err)
	}
	defer f.Close()
	outer := tar.NewReader(f)
	for {
		h, err := outer.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", archive, err)
		}
		if !strings.HasSuffix(h.Name, "/layer.tar") {
			continue
		}
		inner := tar.NewReader(outer)
		for {
			lh, err := inner.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("reading layer %s of %s: %w", h.Name, archive, err)
			}
			name := strings.TrimPrefix(path.Clean("/"+lh.Name), "/")
			if err := fn(name, lh, inner); err != nil {
				return err
			}
		}
	}
}
