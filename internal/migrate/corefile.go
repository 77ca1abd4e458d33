package migrate

import (
	"fmt"
	"strings"
	"unicode"
)

// Corefile syntax, as CoreDNS's (Caddy's) parser reads it:
//
//   - Tokens are separated by white space; a token starting with " runs to
//     the next unescaped " (only \" is an escape) and may span lines.
//   - # starts a comment to the end of the line, wherever it appears (so
//     tls://IP#name cannot be written in a Corefile; CoreDNS uses %name).
//   - A server block is its keys (addresses, on one line, or continued by a
//     trailing comma) and a { } body; a file with one block may leave the
//     braces out.
//   - In a body, each line is a directive: its name, arguments on the same
//     line, and optionally a { } block whose lines are the directive's
//     options (blocks nest).
//   - {$VAR} and {%VAR%} in a token are replaced by the environment
//     variable's value (empty when unset).
//   - (name) { ... } defines a snippet and `import` pulls in a snippet or
//     file; migrate does not follow them (see Parse).

// Token is one word of the Corefile.
type Token struct {
	Text string
	Line int
	// first reports that the token starts its line.
	first bool
}

// ServerBlock is one server block.
type ServerBlock struct {
	Keys       []Token
	Directives []*Directive
	Line       int
}

// Directive is one line of a body (a plugin, or one of its options).
type Directive struct {
	Name  string
	Line  int
	Args  []Token
	Block []*Directive
	// HasBlock reports that the directive had a { } block (maybe empty).
	HasBlock bool
}

// ArgTexts are the arguments' texts.
func (d *Directive) ArgTexts() []string {
	out := make([]string, len(d.Args))
	for i, a := range d.Args {
		out[i] = a.Text
	}
	return out
}

// String is the directive's line as written (without its block).
func (d *Directive) String() string {
	return strings.TrimSpace(d.Name + " " + strings.Join(d.ArgTexts(), " "))
}

// SyntaxError is a Corefile that does not parse.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// File is a parsed Corefile.
type File struct {
	Blocks []*ServerBlock
	// Skipped lists what the parser did not follow: snippets, imports
	// and environment variables that are not set.
	Skipped []Note
}

// lex splits src into tokens.
func lex(src string) ([]Token, error) {
	var toks []Token
	line := 1
	rs := []rune(src)
	newLine := true
	for i := 0; i < len(rs); {
		ch := rs[i]
		switch {
		case ch == '\n':
			line++
			newLine = true
			i++
			continue
		case unicode.IsSpace(ch):
			i++
			continue
		case ch == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
			continue
		}
		start := line
		var b strings.Builder
		if ch == '"' {
			i++
			closed := false
			for i < len(rs) {
				c := rs[i]
				if c == '\\' && i+1 < len(rs) && rs[i+1] == '"' {
					b.WriteRune('"')
					i += 2
					continue
				}
				if c == '"' {
					closed = true
					i++
					break
				}
				if c == '\n' {
					line++
				}
				b.WriteRune(c)
				i++
			}
			if !closed {
				return nil, &SyntaxError{Line: start, Msg: "quoted string not closed"}
			}
		} else {
			for i < len(rs) && !unicode.IsSpace(rs[i]) {
				if rs[i] == '#' {
					// The rest of the line is a comment, even mid-word.
					for i < len(rs) && rs[i] != '\n' {
						i++
					}
					break
				}
				b.WriteRune(rs[i])
				i++
			}
		}
		toks = append(toks, Token{Text: b.String(), Line: start, first: newLine})
		newLine = false
	}
	return toks, nil
}

// parser walks the tokens.
type parser struct {
	toks []Token
	pos  int
	env  func(string) (string, bool)
	f    *File
}

// Parse parses a Corefile. env looks up environment variables (nil: none
// are set). Snippet definitions and imports are skipped, each with a note
// in File.Skipped; the blocks keep everything else.
func Parse(src []byte, env func(string) (string, bool)) (*File, error) {
	toks, err := lex(string(src))
	if err != nil {
		return nil, err
	}
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	p := &parser{toks: toks, env: env, f: &File{}}
	for i := range p.toks {
		p.toks[i].Text = p.expand(p.toks[i])
	}
	for p.pos < len(p.toks) {
		if err := p.block(); err != nil {
			return nil, err
		}
	}
	return p.f, nil
}

// expand replaces {$VAR} and {%VAR%} in the token.
func (p *parser) expand(t Token) string {
	s := t.Text
	for _, delim := range [][2]string{{"{%", "%}"}, {"{$", "}"}} {
		for {
			i := strings.Index(s, delim[0])
			if i < 0 {
				break
			}
			j := strings.Index(s[i+len(delim[0]):], delim[1])
			if j <= 0 {
				break
			}
			name := s[i+len(delim[0]) : i+len(delim[0])+j]
			val, ok := p.env(name)
			if !ok {
				p.f.Skipped = append(p.f.Skipped, Note{Line: t.Line,
					Text: fmt.Sprintf("environment variable %s is not set here: replaced by nothing, as CoreDNS would; check the value the pod would have", name)})
			}
			s = s[:i] + val + s[i+len(delim[0])+j+len(delim[1]):]
		}
	}
	return s
}

func (p *parser) peek() *Token {
	if p.pos < len(p.toks) {
		return &p.toks[p.pos]
	}
	return nil
}

// block parses one server block (or snippet, or top-level import).
func (p *parser) block() error {
	first := p.toks[p.pos]
	if first.Text == "{" || first.Text == "}" {
		return &SyntaxError{Line: first.Line, Msg: fmt.Sprintf("unexpected %q: want server block keys (such as .:53)", first.Text)}
	}
	if first.Text == "import" {
		p.pos++
		arg := p.restOfLine(first.Line)
		p.f.Skipped = append(p.f.Skipped, Note{Line: first.Line,
			Text: fmt.Sprintf("import %s: not followed; the server blocks it would have pulled in are not carried", strings.Join(arg, " "))})
		return nil
	}
	sb := &ServerBlock{Line: first.Line}
	// Keys: the tokens of the first line, and of following lines while a
	// key ends with a comma.
	more := false // the last key ended with a comma
	for {
		t := p.peek()
		if t == nil || t.Text == "{" {
			break
		}
		if p.pos > 0 && len(sb.Keys) > 0 && t.first && !more {
			break
		}
		p.pos++
		more = strings.HasSuffix(t.Text, ",")
		for _, k := range strings.Split(t.Text, ",") {
			if k != "" {
				sb.Keys = append(sb.Keys, Token{Text: k, Line: t.Line})
			}
		}
	}
	if len(sb.Keys) == 0 {
		return &SyntaxError{Line: first.Line, Msg: "server block without keys"}
	}
	t := p.peek()
	if t == nil || t.Text != "{" {
		// Without braces: only the single block of a file, whose body is
		// the rest of the file.
		if len(p.f.Blocks) > 0 {
			return &SyntaxError{Line: first.Line, Msg: fmt.Sprintf("server block %q without { }", first.Text)}
		}
		body, err := p.directives(false)
		if err != nil {
			return err
		}
		sb.Directives = body
		p.f.Blocks = append(p.f.Blocks, sb)
		return nil
	}
	open := p.toks[p.pos]
	p.pos++
	body, err := p.directives(true)
	if err != nil {
		if se, ok := err.(*SyntaxError); ok && se.Msg == eofInBlock {
			se.Line = open.Line
			se.Msg = fmt.Sprintf("server block %q: { not closed", first.Text)
		}
		return err
	}
	if len(sb.Keys) == 1 && strings.HasPrefix(sb.Keys[0].Text, "(") && strings.HasSuffix(sb.Keys[0].Text, ")") {
		p.f.Skipped = append(p.f.Skipped, Note{Line: first.Line,
			Text: fmt.Sprintf("snippet %s: not expanded; the directives of the blocks that import it are not carried", sb.Keys[0].Text)})
		return nil
	}
	sb.Directives = body
	p.f.Blocks = append(p.f.Blocks, sb)
	return nil
}

const eofInBlock = "end of file inside a block"

// restOfLine consumes the tokens left on line.
func (p *parser) restOfLine(line int) []string {
	var out []string
	for t := p.peek(); t != nil && !t.first && t.Line == line; t = p.peek() {
		out = append(out, t.Text)
		p.pos++
	}
	return out
}

// directives parses lines until the closing } (braced) or the end.
func (p *parser) directives(braced bool) ([]*Directive, error) {
	var out []*Directive
	for {
		t := p.peek()
		if t == nil {
			if braced {
				return nil, &SyntaxError{Line: p.toks[len(p.toks)-1].Line, Msg: eofInBlock}
			}
			return out, nil
		}
		if t.Text == "}" {
			if !braced {
				return nil, &SyntaxError{Line: t.Line, Msg: "unexpected }: no block is open"}
			}
			p.pos++
			return out, nil
		}
		if t.Text == "{" {
			return nil, &SyntaxError{Line: t.Line, Msg: "unexpected {: a block must follow a directive"}
		}
		p.pos++
		if t.Text == "import" {
			arg := p.restOfLine(t.Line)
			p.f.Skipped = append(p.f.Skipped, Note{Line: t.Line,
				Text: fmt.Sprintf("import %s: not followed; the directives it would have pulled in are not carried", strings.Join(arg, " "))})
			continue
		}
		d := &Directive{Name: t.Text, Line: t.Line}
		for a := p.peek(); a != nil && !a.first && a.Text != "{" && a.Text != "}"; a = p.peek() {
			d.Args = append(d.Args, *a)
			p.pos++
		}
		// A { right after the arguments opens the directive's block, on
		// the same line or the next (as Caddy reads it).
		if a := p.peek(); a != nil && a.Text == "{" {
			open := *a
			p.pos++
			d.HasBlock = true
			sub, err := p.directives(true)
			if err != nil {
				if se, ok := err.(*SyntaxError); ok && se.Msg == eofInBlock {
					se.Line = open.Line
					se.Msg = fmt.Sprintf("%s: { not closed", d.Name)
				}
				return nil, err
			}
			d.Block = sub
		}
		out = append(out, d)
	}
}
