package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"pistil/models/tokenizer"
)

func init() {
	register(command{name: "tokenize", summary: "encode text from stdin to token ids, or decode ids", run: runTokenize})
}

func runTokenize(args []string) error {
	return tokenizeCmd(args, os.Stdin, os.Stdout)
}

func tokenizeCmd(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlags("tokenize")
	model := fs.String("model", "", "checkpoint or tokenizer directory (with tokenizer.json)")
	fs.Bool("ids", true, "print token ids, space separated (the default)")
	decode := fs.Bool("decode", false, "read space-separated ids from stdin and print their text")
	text := fs.String("text", "", "encode this text instead of stdin (stdin is taken byte for byte, trailing newline included)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" {
		return errors.New("--model DIR is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (text comes from stdin or --text)", fs.Args())
	}
	dir, err := resolveModel(*model)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if *decode {
		ids, err := readIDs(stdin, tok)
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, tok.Decode(ids))
		return err
	}
	input := *text
	if !flagGiven(fs, "text") {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		input = string(data)
	}
	ids := tok.Encode(input)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	_, err = fmt.Fprintln(w, strings.Join(parts, " "))
	return err
}

// readIDs parses whitespace-separated ids, refusing anything that is not a used id.
func readIDs(r io.Reader, tok *tokenizer.Tokenizer) ([]int32, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	fields := strings.FieldsFunc(string(data), func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == ','
	})
	ids := make([]int32, len(fields))
	for i, f := range fields {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("input item %d: %q is not a token id", i+1, f)
		}
		if _, ok := tok.Token(int32(n)); !ok {
			return nil, fmt.Errorf("input item %d: id %d is not in the vocabulary (size %d)", i+1, n, tok.VocabSize())
		}
		ids[i] = int32(n)
	}
	return ids, nil
}

// flagGiven reports whether the flag was on the command line (an empty --text is text).
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
