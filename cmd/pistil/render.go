package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"pistil/models/chat"
	"pistil/models/tokenizer"
)

func init() {
	register(command{name: "render", summary: "render a conversation with the checkpoint's chat template", run: runRender})
}

func runRender(args []string) error {
	return renderCmd(args, os.Stdin, os.Stdout)
}

func renderCmd(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlags("render")
	model := fs.String("model", "", "checkpoint or tokenizer directory (tokenizer_config.json chat_template or chat_template.jinja)")
	messagesPath := fs.String("messages", "", "JSON file: a list of messages, or an object with \"messages\" (and optionally \"tools\"); - for stdin")
	toolsPath := fs.String("tools", "", "JSON file with a list of tool definitions")
	noThink := fs.Bool("no-think", false, "render with enable_thinking=false")
	preserve := fs.Bool("preserve-thinking", false, "render with preserve_thinking=true (keep reasoning of earlier turns)")
	noGen := fs.Bool("no-generation-prompt", false, "leave out the assistant generation prompt")
	ids := fs.Bool("ids", false, "print the prompt's token ids instead of its text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *messagesPath == "" {
		return errors.New("--model DIR and --messages FILE.json are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	dir, err := resolveModel(*model)
	if err != nil {
		return err
	}
	*model = dir
	tmpl, err := chat.LoadTemplate(*model)
	if err != nil {
		return err
	}
	msgs, tools, err := readConversation(*messagesPath, stdin)
	if err != nil {
		return err
	}
	if *toolsPath != "" {
		data, err := os.ReadFile(*toolsPath)
		if err != nil {
			return err
		}
		tools = nil
		if err := json.Unmarshal(data, &tools); err != nil {
			return fmt.Errorf("%s: want a JSON list of tools: %w", *toolsPath, err)
		}
	}
	opts := chat.RenderOptions{Messages: msgs, Tools: tools, AddGenerationPrompt: !*noGen}
	if *noThink {
		off := false
		opts.EnableThinking = &off
	}
	if *preserve {
		on := true
		opts.PreserveThinking = &on
	}
	prompt, err := tmpl.Render(opts)
	if err != nil {
		return err
	}
	if !*ids {
		_, err = io.WriteString(stdout, prompt)
		return err
	}
	tok, err := tokenizer.Load(*model)
	if err != nil {
		return err
	}
	// As the server does: control tokens only where the template writes them.
	rendered, err := tmpl.RenderPrompt(tok, opts, -1)
	if err != nil {
		return err
	}
	encoded := rendered.IDs
	parts := make([]string, len(encoded))
	for i, id := range encoded {
		parts[i] = strconv.Itoa(int(id))
	}
	_, err = fmt.Fprintln(stdout, strings.Join(parts, " "))
	return err
}

// readConversation reads a message list, or an object holding "messages" and "tools".
func readConversation(path string, stdin io.Reader) ([]chat.Message, []json.RawMessage, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, nil, err
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var conv struct {
			Messages []chat.Message    `json:"messages"`
			Tools    []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(trimmed, &conv); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if conv.Messages == nil {
			return nil, nil, fmt.Errorf("%s: the object has no \"messages\" list", path)
		}
		return conv.Messages, conv.Tools, nil
	}
	var msgs []chat.Message
	if err := json.Unmarshal(trimmed, &msgs); err != nil {
		return nil, nil, fmt.Errorf("%s: want a JSON list of messages: %w", path, err)
	}
	return msgs, nil, nil
}
