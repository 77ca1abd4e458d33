// Package imagebuild builds the nodedns image without a Docker engine or a
// registry, from the repository's Dockerfile, so that the Dockerfile stays
// the one description of the image.
//
// It reads the small subset of Dockerfile syntax the repository uses (ARG,
// FROM, WORKDIR, COPY, RUN, ENV, USER, ENTRYPOINT, CMD, LABEL) and refuses
// anything else, so a change to the Dockerfile that this package cannot
// reproduce fails loudly instead of drifting. From the build stage it takes
// the `go build` command (environment and arguments); from the final stage
// the Debian base (suite and the packages of its `apt-get install`), the
// files copied from the build stage, and the image configuration. The root
// filesystem itself is made by mmdebstrap (scripts/image.sh); this package
// runs the go build and writes a docker-archive tarball that
// `ctr images import` accepts.
package imagebuild

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// Spec is what a Dockerfile says about the image.
type Spec struct {
	// Base is the final stage's base image reference after ARG expansion
	// ("debian:bookworm-slim").
	Base string
	// Suite is the Debian suite of Base ("bookworm"), Slim whether Base is a
	// -slim variant.
	Suite string
	Slim  bool
	// Packages are installed into the final stage with apt-get.
	Packages []string
	// Build is the build stage's go build.
	Build GoBuild
	// Copies are the files the final stage copies from the build stage.
	Copies []Copy
	// Image configuration of the final stage.
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// GoBuild is a `go build` run in the build stage.
type GoBuild struct {
	// Env holds the assignments before `go` on the RUN line
	// (CGO_ENABLED=0 GOOS=$TARGETOS ...), ARGs expanded.
	Env []string
	// Args are the arguments after `go` (build -trimpath ...), ARGs
	// expanded.
	Args []string
	// Dir is the stage's WORKDIR, where the build context was copied.
	Dir string
}

// Copy is a COPY --from=<build stage> SRC DST of the final stage.
type Copy struct {
	Src, Dst string
}

// instruction is one logical Dockerfile line.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

// ParseFile reads the Dockerfile at path; args override ARG defaults
// (as --build-arg does).
func ParseFile(path string, args map[string]string) (*Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening Dockerfile: %w", err)
	}
	defer f.Close()
	s, err := Parse(f, args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a Dockerfile; args override ARG defaults.
func Parse(r io.Reader, args map[string]string) (*Spec, error) {
	ins, err := split(r)
	if err != nil {
		return nil, err
	}
	p := parser{given: args, global: map[string]string{}, stages: map[string]bool{}}
	for _, in := range ins {
		if err := p.step(in); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", in.line, in.cmd, err)
		}
	}
	return p.finish()
}

// split joins continuation lines and drops comments and blank lines.
func split(r io.Reader) ([]instruction, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var out []instruction
	var cur strings.Builder
	start, n := 0, 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(line)
		cmd, rest, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest)})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading Dockerfile: %w", err)
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: instruction continues past the end of the file", start)
	}
	return out, nil
}

type parser struct {
	given  map[string]string
	global map[string]string // ARGs before the first FROM
	stage  *stage
	stages map[string]bool
	build  *stage // the stage that runs go build
	final  *stage
}

type stage struct {
	name     string
	base     string
	args     map[string]string
	env      []string
	workdir  string
	spec     Spec
	goBuild  *GoBuild
	packages []string
	copies   []Copy
}

func (p *parser) lookup(name string) (string, bool) {
	if p.stage != nil {
		if v, ok := p.stage.args[name]; ok {
			return v, true
		}
	}
	v, ok := p.global[name]
	return v, ok
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expand replaces $NAME and ${NAME} with ARG values; an unknown name is an
// error, not an empty string.
func (p *parser) expand(s string) (string, error) {
	var bad string
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := p.lookup(name)
		if !ok {
			bad = name
		}
		return v
	})
	if bad != "" {
		return "", fmt.Errorf("$%s is not a declared ARG", bad)
	}
	return out, nil
}

func (p *parser) declare(dst map[string]string, spec string) error {
	for _, a := range strings.Fields(spec) {
		name, def, hasDef := strings.Cut(a, "=")
		if v, ok := p.given[name]; ok {
			dst[name] = v
			continue
		}
		if !hasDef {
			if v, ok := p.global[name]; ok {
				dst[name] = v
				continue
			}
			if v, ok := platformDefault(name); ok {
				dst[name] = v
				continue
			}
			return fmt.Errorf("ARG %s has no default and was not given", name)
		}
		v, err := p.expand(def)
		if err != nil {
			return err
		}
		dst[name] = v
	}
	return nil
}

func (p *parser) step(in instruction) error {
	if p.stage == nil && in.cmd != "ARG" && in.cmd != "FROM" {
		return fmt.Errorf("only ARG may come before the first FROM")
	}
	switch in.cmd {
	case "ARG":
		if p.stage == nil {
			return p.declare(p.global, in.args)
		}
		return p.declare(p.stage.args, in.args)
	case "FROM":
		return p.from(in.args)
	case "WORKDIR":
		d, err := p.expand(in.args)
		if err != nil {
			return err
		}
		p.stage.workdir = d
		p.stage.spec.WorkingDir = d
	case "ENV":
		return p.env(in.args)
	case "COPY":
		return p.copy(in.args)
	case "RUN":
		return p.run(in.args)
	case "USER":
		u, err := p.expand(in.args)
		if err != nil {
			return err
		}
		p.stage.spec.User = u
	case "ENTRYPOINT", "CMD":
		var v []string
		if err := json.Unmarshal([]byte(in.args), &v); err != nil {
			return fmt.Errorf("want the exec (JSON array) form: %w", err)
		}
		if in.cmd == "ENTRYPOINT" {
			p.stage.spec.Entrypoint = v
		} else {
			p.stage.spec.Cmd = v
		}
	case "LABEL":
		return p.label(in.args)
	default:
		return fmt.Errorf("not supported by imagebuild (add it there, or the image would drift from the Dockerfile)")
	}
	return nil
}

func (p *parser) from(args string) error {
	f := strings.Fields(args)
	var platform string
	if len(f) > 0 && strings.HasPrefix(f[0], "--platform=") {
		platform, f = f[0], f[1:]
	}
	_ = platform // a local build is for this machine; TARGETOS/TARGETARCH pick the binary's platform
	var name string
	switch {
	case len(f) == 1:
	case len(f) == 3 && strings.EqualFold(f[1], "AS"):
		name = f[2]
	default:
		return fmt.Errorf("want FROM [--platform=...] IMAGE [AS NAME], got %q", args)
	}
	p.stage = &stage{name: name, args: map[string]string{}}
	base, err := p.expand(f[0])
	if err != nil {
		return err
	}
	if p.stages[base] {
		return fmt.Errorf("FROM another stage (%s) is not supported", base)
	}
	p.stage.base = base
	if name != "" {
		p.stages[name] = true
	}
	p.final = p.stage
	return nil
}

func (p *parser) env(args string) error {
	for _, kv := range strings.Fields(args) {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("want ENV KEY=VALUE ..., got %q", args)
		}
		v, err := p.expand(kv)
		if err != nil {
			return err
		}
		p.stage.env = append(p.stage.env, v)
		p.stage.spec.Env = append(p.stage.spec.Env, v)
	}
	return nil
}

func (p *parser) label(args string) error {
	words, err := shellWords(args)
	if err != nil {
		return err
	}
	if p.stage.spec.Labels == nil {
		p.stage.spec.Labels = map[string]string{}
	}
	for _, kv := range words {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("want LABEL KEY=VALUE ..., got %q", args)
		}
		if v, err = p.expand(v); err != nil {
			return err
		}
		p.stage.spec.Labels[k] = v
	}
	return nil
}

func (p *parser) copy(args string) error {
	f := strings.Fields(args)
	from := ""
	if len(f) > 0 && strings.HasPrefix(f[0], "--from=") {
		from, f = strings.TrimPrefix(f[0], "--from="), f[1:]
	}
	if len(f) < 2 {
		return fmt.Errorf("want COPY SRC... DST, got %q", args)
	}
	if from == "" {
		// Copies of the build context into the build stage; the local build
		// runs in the repository itself.
		return nil
	}
	if !p.stages[from] {
		return fmt.Errorf("COPY --from=%s: no such stage", from)
	}
	if len(f) != 2 {
		return fmt.Errorf("COPY --from takes one source, got %q", args)
	}
	p.stage.copies = append(p.stage.copies, Copy{Src: f[0], Dst: f[1]})
	return nil
}

// run understands the two RUN forms the Dockerfile uses: the build stage's
// `go mod download` / `go build`, and the final stage's apt-get install.
func (p *parser) run(args string) error {
	cmd, err := p.expand(args)
	if err != nil {
		return err
	}
	for _, part := range strings.Split(cmd, "&&") {
		words, err := shellWords(part)
		if err != nil {
			return err
		}
		if err := p.runOne(words); err != nil {
			return fmt.Errorf("%q: %w", strings.TrimSpace(part), err)
		}
	}
	return nil
}

func (p *parser) runOne(words []string) error {
	var env []string
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		env, words = append(env, words[0]), words[1:]
	}
	if len(words) == 0 {
		return fmt.Errorf("empty command")
	}
	switch {
	case words[0] == "go" && len(words) > 1 && words[1] == "mod":
		return nil // module download: the local build uses the module cache
	case words[0] == "go" && len(words) > 1 && words[1] == "build":
		if p.build != nil {
			return fmt.Errorf("a second go build")
		}
		p.build = p.stage
		p.stage.goBuild = &GoBuild{Env: env, Args: words[1:], Dir: p.stage.workdir}
		return nil
	case words[0] == "apt-get" && len(words) > 1 && words[1] == "update":
		return nil
	case words[0] == "apt-get" && len(words) > 1 && words[1] == "install":
		for _, w := range words[2:] {
			switch {
			case w == "-y" || w == "--no-install-recommends" || w == "-qq" || w == "-q":
			case strings.HasPrefix(w, "-"):
				return fmt.Errorf("apt-get option %s not supported", w)
			default:
				p.stage.packages = append(p.stage.packages, w)
			}
		}
		return nil
	case words[0] == "rm" && len(words) == 3 && words[1] == "-rf" && strings.HasPrefix(words[2], "/var/lib/apt/lists"):
		return nil // mmdebstrap leaves no package lists behind
	}
	return fmt.Errorf("command not supported by imagebuild")
}

func (p *parser) finish() (*Spec, error) {
	if p.final == nil {
		return nil, fmt.Errorf("no FROM")
	}
	if p.build == nil {
		return nil, fmt.Errorf("no go build in any stage")
	}
	if p.final == p.build {
		return nil, fmt.Errorf("the final stage must not be the build stage")
	}
	s := p.final.spec
	s.Base = p.final.base
	s.Packages = p.final.packages
	s.Copies = p.final.copies
	s.Build = *p.build.goBuild
	m := regexp.MustCompile(`^(?:docker\.io/)?(?:library/)?debian:([a-z]+)(-slim)?(?:@sha256:[0-9a-f]{64})?$`).FindStringSubmatch(s.Base)
	if m == nil {
		return nil, fmt.Errorf("final base %q: want debian:SUITE[-slim][@sha256:DIGEST]", s.Base)
	}
	s.Suite, s.Slim = m[1], m[2] != ""
	if len(s.Copies) == 0 {
		return nil, fmt.Errorf("the final stage copies nothing from the build stage")
	}
	return &s, nil
}

// shellWords splits s as a POSIX shell would for the simple commands the
// Dockerfile uses: words, single and double quotes, backslash escapes. No
// expansion happens here (ARGs were expanded before).
func shellWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`, s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == ';' || c == '|' || c == '>' || c == '<' || c == '`' || c == '(':
			return nil, fmt.Errorf("shell syntax %q not supported in %q", c, s)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
