package imagebuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// platformDefault gives the automatic platform ARGs for a build on this
// machine (BuildKit sets them from --platform).
func platformDefault(name string) (string, bool) {
	switch name {
	case "TARGETOS", "BUILDOS":
		return runtime.GOOS, true
	case "TARGETARCH", "BUILDARCH":
		return runtime.GOARCH, true
	case "TARGETPLATFORM", "BUILDPLATFORM":
		return runtime.GOOS + "/" + runtime.GOARCH, true
	}
	return "", false
}

// Arch is the image's architecture: the GOARCH the build stage compiles
// for (TARGETARCH), else this machine's.
func (s *Spec) Arch() string {
	for _, kv := range s.Build.Env {
		if v, ok := strings.CutPrefix(kv, "GOARCH="); ok && v != "" {
			return v
		}
	}
	return runtime.GOARCH
}

// outPath maps an absolute path of the build stage (/out/nodedns) into
// outDir on this machine.
func outPath(outDir, p string) string {
	return filepath.Join(outDir, filepath.Clean("/"+p))
}

// RunBuild runs the build stage's go build in contextDir (the repository,
// which the Dockerfile copies to its WORKDIR), with the stage's environment
// and arguments; output paths land under outDir. It returns the local path
// of every file the final stage copies, keyed by its path in the image.
func (s *Spec) RunBuild(ctx context.Context, contextDir, outDir string) (map[string]string, error) {
	args := append([]string(nil), s.Build.Args...)
	for i := 0; i < len(args); i++ {
		if args[i] == "-o" && i+1 < len(args) {
			args[i+1] = outPath(outDir, args[i+1])
			if strings.HasSuffix(s.Build.Args[i+1], "/") {
				args[i+1] += "/"
			}
			i++
		}
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = contextDir
	cmd.Env = append(os.Environ(), s.Build.Env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	files := map[string]string{}
	for _, c := range s.Copies {
		src := outPath(outDir, c.Src)
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("COPY --from build %s: %w", c.Src, err)
		}
		files[c.Dst] = src
	}
	return files, nil
}
