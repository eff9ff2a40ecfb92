package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPromptIDsAreDeterministicPrefixesInVocabulary(t *testing.T) {
	long, short := PromptIDs(1000, 512), PromptIDs(10, 512)
	if !slices.Equal(long[:10], short) {
		t.Errorf("a shorter prompt is not a prefix of a longer one: %v vs %v", short, long[:10])
	}
	if !slices.Equal(long, PromptIDs(1000, 512)) {
		t.Error("two calls gave different ids")
	}
	distinct := map[int32]bool{}
	for _, id := range long {
		if id < 0 || id >= 512 {
			t.Fatalf("id %d outside [0, 512)", id)
		}
		distinct[id] = true
	}
	if len(distinct) < 400 { // 1000 uniform draws from 512 cover ~440 ids
		t.Errorf("only %d distinct ids in 1000: not spread over the vocabulary", len(distinct))
	}
}

// TestMeasureStatistics: warm-up runs are discarded and the median of an even number of
// runs is the mean of the middle two.
func TestMeasureStatistics(t *testing.T) {
	durations := []time.Duration{time.Hour, 4 * time.Second, 1 * time.Second, 2 * time.Second, 8 * time.Second}
	calls := 0
	m, err := measure(Spec{Repeats: 4, Warmup: 1}, 8, func() (time.Duration, error) {
		d := durations[calls]
		calls++
		return d, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 5 || len(m.Runs) != 4 {
		t.Fatalf("%d calls, %d runs recorded; want 5 and 4", calls, len(m.Runs))
	}
	// 8 tokens in 4, 1, 2, 8 s: 2, 8, 4, 1 tok/s.
	if m.MinTPS != 1 || m.MaxTPS != 8 || m.MedianTPS != 3 || m.Runs[0].TokensPerSec != 2 {
		t.Errorf("min %v median %v max %v first %v; want 1, 3, 8, 2", m.MinTPS, m.MedianTPS, m.MaxTPS, m.Runs[0].TokensPerSec)
	}
}

func TestSpecCapacityAndValidate(t *testing.T) {
	s := Spec{Prompts: []int{256, 1024}, Contexts: []int{0, 4096}, DecodeTokens: 32, Repeats: 1}
	if got := s.Capacity(); got != 4128 {
		t.Errorf("capacity %d, want 4096+32", got)
	}
	if err := s.Validate(4128); err != nil {
		t.Errorf("a spec that fits: %v", err)
	}
	if err := s.Validate(4127); err == nil || !strings.Contains(err.Error(), "context 4096 plus 32 decode tokens exceeds") {
		t.Errorf("one token over the model's context: %v", err)
	}
}

// TestReadSumKernelsVisitEveryWord: both read loops fold every word by OR, so a word
// with a bit no other word has that went unread shows up as a missing bit.
func TestReadSumKernelsVisitEveryWord(t *testing.T) {
	buf := make([]uint64, 64*37)
	for i := range buf {
		buf[i] = 1 << (uint(i) % 61)
	}
	buf[64*36+63] = 1 << 63 // the last word alone has the top bit
	buf[0] |= 1 << 62       // and the first alone bit 62
	var want uint64
	for _, v := range buf {
		want |= v
	}
	if got := readSumGo(buf); got != want {
		t.Errorf("portable read loop folds to %#x, want %#x (a word missed)", got, want)
	}
	if got := readSum(buf); got != want {
		t.Errorf("%s read loop folds to %#x, want %#x (a word missed)", readKernel, got, want)
	}
}

func TestMeasureBandwidth(t *testing.T) {
	if _, err := MeasureBandwidth(1<<10, 1, 1); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("a 1 KiB buffer: %v, want a too-small error", err)
	}
	if _, err := MeasureBandwidth(8<<20, 1, 0); err == nil || !strings.Contains(err.Error(), "passes 0") {
		t.Errorf("zero passes: %v", err)
	}
	bw, err := MeasureBandwidth(8<<20, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if bw.BytesPerSec <= 0 || bw.SingleThread <= 0 || bw.Threads != 2 || bw.BufferBytes != 8<<20 {
		t.Errorf("bandwidth %+v: want positive speeds over 2 threads and 8 MiB", bw)
	}
}
