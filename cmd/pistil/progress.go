package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// progress shows how far a long job is: a bar rewritten in place on a terminal, plain
// lines otherwise (logs, pipes, CI), so a log file never fills with carriage returns.
type progress struct {
	w      io.Writer
	what   string
	unit   string
	tty    bool
	active bool
}

func newProgress(w io.Writer, what, unit string) *progress {
	return &progress{w: w, what: what, unit: unit, tty: isTerminal(w)}
}

// isTerminal reports whether w is a character device such as a terminal (and TERM does
// not say the terminal cannot move the cursor).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

const barWidth = 30

func (p *progress) update(done, total int64, extra string) {
	if p.w == nil {
		return
	}
	frac := 0.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	if p.tty {
		filled := int(frac * barWidth)
		fmt.Fprintf(p.w, "\r\033[K%s [%s%s] %3.0f%% %s %s", p.what, strings.Repeat("#", filled),
			strings.Repeat(".", barWidth-filled), 100*frac, quantities(done, total, p.unit), extra)
		p.active = true
		return
	}
	fmt.Fprintf(p.w, "%s: %s (%.0f%%) %s\n", p.what, strings.Replace(quantities(done, total, p.unit), "/", " of ", 1), 100*frac, extra)
}

// end finishes the bar's line on a terminal.
func (p *progress) end() {
	if p.tty && p.active {
		fmt.Fprintln(p.w)
		p.active = false
	}
}

// quantities prints "done/total unit"; bytes in GB, or MB below a gigabyte.
func quantities(done, total int64, unit string) string {
	if unit != "bytes" {
		return fmt.Sprintf("%d/%d %s", done, total, unit)
	}
	if total >= 1e9 {
		return fmt.Sprintf("%.2f/%.2f GB", float64(done)/1e9, float64(total)/1e9)
	}
	return fmt.Sprintf("%.1f/%.1f MB", float64(done)/1e6, float64(total)/1e6)
}
