package imagebuild

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// defaultPath is the PATH the Debian base images set in their config; an
// image built on them inherits it.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Image is what WriteArchive writes: layers bottom-up and the
// configuration.
type Image struct {
	// Ref is the reference containerd records on import
	// ("localhost/nodedns:v1").
	Ref  string
	Arch string
	// BaseTar is an uncompressed tar of the root filesystem (mmdebstrap's
	// output), the bottom layer; empty for an image of Files alone.
	BaseTar string
	// Files maps a path in the image to a local file; they form one layer
	// above the base. Parent directories must exist in the base (or be "/").
	Files      map[string]string
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
	// Created stamps the configuration (zero: now).
	Created time.Time
}

// FromSpec is the Image the Dockerfile describes, given the base root
// filesystem and the files the build produced.
func FromSpec(s *Spec, ref, baseTar string, files map[string]string) Image {
	return Image{Ref: ref, Arch: s.Arch(), BaseTar: baseTar, Files: files, User: s.User,
		Entrypoint: s.Entrypoint, Cmd: s.Cmd, Env: s.Env, WorkingDir: s.WorkingDir, Labels: s.Labels}
}

// imageConfig is the part of the OCI/Docker image configuration the
// runtime reads.
type imageConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       struct {
		User       string            `json:"User,omitempty"`
		Env        []string          `json:"Env,omitempty"`
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Cmd        []string          `json:"Cmd,omitempty"`
		WorkingDir string            `json:"WorkingDir,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history,omitempty"`
}

type history struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

// ReadConfig returns the configuration stored in a docker archive written
// by WriteArchive (tests compare it with the Dockerfile).
func ReadConfig(archive string) (user string, entrypoint, cmd, env []string, err error) {
	var c imageConfig
	if err = readArchiveJSON(archive, func(name string) bool {
		return strings.HasSuffix(name, ".json") && name != "manifest.json"
	}, &c); err != nil {
		return "", nil, nil, nil, err
	}
	return c.Config.User, c.Config.Entrypoint, c.Config.Cmd, c.Config.Env, nil
}

func readArchiveJSON(archive string, match func(string) bool, v any) error {
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("opening image archive: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%s: no matching JSON entry", archive)
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", archive, err)
		}
		if match(h.Name) {
			if err := json.NewDecoder(tr).Decode(v); err != nil {
				return fmt.Errorf("%s: %s: %w", archive, h.Name, err)
			}
			return nil
		}
	}
}

// WriteArchive writes img as a docker-archive tarball (the `docker save`
// layout: manifest.json, the configuration and one uncompressed tar per
// layer), which `ctr images import` reads.
func WriteArchive(out string, img Image) error {
	dir, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	var layers []string // local paths
	if img.BaseTar != "" {
		layers = append(layers, img.BaseTar)
	}
	if len(img.Files) > 0 {
		p := path.Join(dir, "files.tar")
		if err := writeFilesLayer(p, img.Files); err != nil {
			return err
		}
		layers = append(layers, p)
	}
	if len(layers) == 0 {
		return fmt.Errorf("image %s has no layers", img.Ref)
	}
	created := img.Created
	if created.IsZero() {
		created = time.Now().UTC().Truncate(time.Second)
	}
	var cfg imageConfig
	cfg.Architecture, cfg.OS, cfg.Created = img.Arch, "linux", created
	cfg.Config.User, cfg.Config.Entrypoint, cfg.Config.Cmd = img.User, img.Entrypoint, img.Cmd
	cfg.Config.WorkingDir, cfg.Config.Labels = img.WorkingDir, img.Labels
	cfg.Config.Env = img.Env
	if !hasPath(img.Env) {
		cfg.Config.Env = append([]string{defaultPath}, img.Env...)
	}
	cfg.RootFS.Type = "layers"
	var layerNames []string
	for i, l := range layers {
		sum, err := sha256File(l)
		if err != nil {
			return err
		}
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, "sha256:"+sum)
		layerNames = append(layerNames, sum+"/layer.tar")
		by := "imagebuild: files from the build stage"
		if i == 0 && img.BaseTar != "" {
			by = "imagebuild: root filesystem " + path.Base(img.BaseTar)
		}
		cfg.History = append(cfg.History, history{Created: created, CreatedBy: by})
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding image config: %w", err)
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{img.Ref}, "Layers": layerNames}})
	if err != nil {
		return fmt.Errorf("encoding manifest: %w", err)
	}

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("creating %s: %w", tmp, err)
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	if err := addBytes(tw, cfgName, cfgJSON); err != nil {
		f.Close()
		return err
	}
	for i, l := range layers {
		if err := addFile(tw, layerNames[i], l, 0o644); err != nil {
			f.Close()
			return err
		}
	}
	if err := addBytes(tw, "manifest.json", manifest); err != nil {
		f.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("moving image archive into place: %w", err)
	}
	return nil
}

func hasPath(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return true
		}
	}
	return false
}

// writeFilesLayer writes a layer tar holding files (image path -> local
// path), owned by root, with the local files' permission bits.
func writeFilesLayer(out string, files map[string]string) error {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("creating layer: %w", err)
	}
	tw := tar.NewWriter(f)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !path.IsAbs(n) {
			f.Close()
			return fmt.Errorf("image path %q is not absolute", n)
		}
		st, err := os.Stat(files[n])
		if err != nil {
			f.Close()
			return fmt.Errorf("layer file for %s: %w", n, err)
		}
		if err := addFile(tw, strings.TrimPrefix(path.Clean(n), "/"), files[n], int64(st.Mode().Perm())); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("writing layer: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing layer: %w", err)
	}
	return nil
}

func addBytes(tw *tar.Writer, name string, b []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("archive entry %s: %w", name, err)
	}
	if _, err := tw.Write(b); err != nil {
		return fmt.Errorf("archive entry %s: %w", name, err)
	}
	return nil
}

func addFile(tw *tar.Writer, name, local string, mode int64) error {
	f, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("archive entry %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("archive entry %s: %w", name, err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: st.Size(), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("archive entry %s: %w", name, err)
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("archive entry %s: %w", name, err)
	}
	return nil
}

func sha256File(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("hashing layer: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
