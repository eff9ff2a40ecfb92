package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// hfRepoID is what Hugging Face accepts as a model repository id: owner/name.
var hfRepoID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// resolveModel turns --model into a checkpoint folder: an existing path is used as it
// is; otherwise a Hugging Face repo id (mlx-community/Qwen3.6-35B-A3B-4bit) is looked up
// in the local Hugging Face cache, following refs/main to its snapshot. Nothing is
// downloaded; the error says where it looked.
func resolveModel(arg string) (string, error) {
	if arg == "" {
		return "", errors.New("--model DIR is required (a checkpoint folder, or a Hugging Face repo id in the local cache)")
	}
	if _, err := os.Stat(arg); err == nil || !hfRepoID.MatchString(arg) || strings.Contains(arg, "..") {
		return arg, nil // a path: its loader reports what is wrong with it
	}
	caches := hfCacheDirs()
	folder := "models--" + strings.ReplaceAll(arg, "/", "--")
	var looked []string
	for _, cache := range caches {
		repo := filepath.Join(cache, folder)
		dir, err := hfSnapshot(repo)
		if err == nil {
			return dir, nil
		}
		looked = append(looked, err.Error())
	}
	return "", fmt.Errorf("--model %s: no such folder, and not in the local Hugging Face cache (pistil does not download; "+
		"fetch it with `hf download %s`). Looked in:\n  %s", arg, arg, strings.Join(looked, "\n  "))
}

// hfCacheDirs are the Hugging Face hub caches in the order huggingface_hub resolves
// them: HF_HUB_CACHE, then HF_HOME/hub, then XDG_CACHE_HOME/huggingface/hub or
// ~/.cache/huggingface/hub.
func hfCacheDirs() []string {
	var dirs []string
	add := func(d string) {
		for _, have := range dirs {
			if have == d {
				return
			}
		}
		dirs = append(dirs, d)
	}
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		add(d)
	}
	if d := os.Getenv("HUGGINGFACE_HUB_CACHE"); d != "" { // the older name
		add(d)
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		add(filepath.Join(d, "hub"))
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		add(filepath.Join(d, "huggingface", "hub"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		add(filepath.Join(home, ".cache", "huggingface", "hub"))
	}
	return dirs
}

// hfSnapshot is the snapshot folder refs/main names in one cached repository.
func hfSnapshot(repo string) (string, error) {
	ref, err := os.ReadFile(filepath.Join(repo, "refs", "main"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, statErr := os.Stat(repo); statErr != nil {
				return "", fmt.Errorf("%s (not there)", repo)
			}
			return "", fmt.Errorf("%s (no refs/main: the download did not finish?)", repo)
		}
		return "", fmt.Errorf("%s: %v", repo, err)
	}
	commit := strings.TrimSpace(string(ref))
	if commit == "" || strings.ContainsAny(commit, `/\`) || commit == "." || commit == ".." {
		return "", fmt.Errorf("%s: refs/main holds %q, not a commit", repo, truncateText(commit, 60))
	}
	dir := filepath.Join(repo, "snapshots", commit)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return "", fmt.Errorf("%s: refs/main names snapshot %s, which has no config.json", repo, commit)
	}
	return dir, nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
