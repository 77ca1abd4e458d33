// Command imagebuild builds container images without a Docker engine for
// scripts/image.sh (see package internal/imagebuild):
//
//	imagebuild plan -f Dockerfile [-build-arg K=V ...]
//	    print the final stage's Debian suite, slimness, architecture and
//	    packages, one key=value a line, for mmdebstrap
//	imagebuild build -f Dockerfile -context DIR -rootfs ROOTFS.tar -tag REF -o OUT.tar [-build-arg K=V ...]
//	    run the Dockerfile's go build and write the image as a docker archive
//	imagebuild verify -f Dockerfile [-build-arg K=V ...] [-want /PATH ...] IMAGE.tar
//	    check that an image is what the Dockerfile describes
//	imagebuild assemble [-rootfs ROOTFS.tar] -file /IMAGE/PATH=LOCAL ... -entrypoint JSON [-cmd JSON] [-user U] -tag REF -o OUT.tar
//	    write an image of a root filesystem and files (test images)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"

	"github.com/nodedns/nodedns/internal/imagebuild"
)

type kvList map[string]string

func (l kvList) String() string { return fmt.Sprint(map[string]string(l)) }

func (l kvList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	l[k] = v
	return nil
}

type wantList []string

func (l *wantList) String() string { return strings.Join(*l, ",") }

func (l *wantList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("want plan, build, verify or assemble")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dockerfile := fs.String("f", "Dockerfile", "Dockerfile")
	contextDir := fs.String("context", ".", "build context (the repository)")
	rootfs := fs.String("rootfs", "", "root filesystem tar (mmdebstrap output)")
	tag := fs.String("tag", "", "image reference to record")
	out := fs.String("o", "", "output docker archive")
	user := fs.String("user", "", "image user")
	entrypoint := fs.String("entrypoint", "", "entrypoint as a JSON array")
	cmdJSON := fs.String("cmd", "", "command as a JSON array")
	buildArgs, files := kvList{}, kvList{}
	var want wantList
	fs.Var(&want, "want", "verify: a path the image must contain (repeatable)")
	fs.Var(buildArgs, "build-arg", "KEY=VALUE overriding an ARG default (repeatable)")
	fs.Var(files, "file", "/IMAGE/PATH=LOCAL file to add (repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "plan":
		s, err := imagebuild.ParseFile(*dockerfile, buildArgs)
		if err != nil {
			return err
		}
		fmt.Printf("suite=%s\nslim=%t\narch=%s\npackages=%s\n", s.Suite, s.Slim, s.Arch(), strings.Join(s.Packages, ","))
		return nil
	case "build":
		if *rootfs == "" || *tag == "" || *out == "" {
			return errors.New("build needs -rootfs, -tag and -o")
		}
		s, err := imagebuild.ParseFile(*dockerfile, buildArgs)
		if err != nil {
			return err
		}
		tmp, err := os.MkdirTemp("", "imagebuild-out-")
		if err != nil {
			return fmt.Errorf("temp dir: %w", err)
		}
		defer os.RemoveAll(tmp)
		built, err := s.RunBuild(ctx, *contextDir, tmp)
		if err != nil {
			return err
		}
		return imagebuild.WriteArchive(*out, imagebuild.FromSpec(s, *tag, *rootfs, built))
	case "verify":
		if fs.NArg() != 1 {
			return errors.New("verify needs one image archive")
		}
		s, err := imagebuild.ParseFile(*dockerfile, buildArgs)
		if err != nil {
			return err
		}
		if err := imagebuild.Verify(s, fs.Arg(0), want); err != nil {
			return err
		}
		fmt.Printf("%s: matches %s (entrypoint %q, cmd %q, user %q, build %q)\n", fs.Arg(0), *dockerfile, s.Entrypoint, s.Cmd, s.User, s.Build.Args)
		return nil
	case "assemble":
		if *tag == "" || *out == "" || *entrypoint == "" {
			return errors.New("assemble needs -tag, -o and -entrypoint")
		}
		img := imagebuild.Image{Ref: *tag, Arch: runtime.GOARCH, BaseTar: *rootfs, Files: files, User: *user}
		if err := json.Unmarshal([]byte(*entrypoint), &img.Entrypoint); err != nil {
			return fmt.Errorf("-entrypoint %q: want a JSON array: %w", *entrypoint, err)
		}
		if *cmdJSON != "" {
			if err := json.Unmarshal([]byte(*cmdJSON), &img.Cmd); err != nil {
				return fmt.Errorf("-cmd %q: want a JSON array: %w", *cmdJSON, err)
			}
		}
		return imagebuild.WriteArchive(*out, img)
	}
	return fmt.Errorf("unknown command %q: want plan, build, verify or assemble", args[0])
}
