package serve

import (
	"encoding/json"
	"sync"
)

// Bounds of the in-memory store that previous_response_id reads: a request naming a
// response no longer (or never) kept gets a 400 saying so.
const (
	responseStoreEntries = 64
	responseStoreBytes   = 32 << 20
)

// responseStore keeps, per stored response id, the conversation up to and including
// that response as chat messages, least recently used first out. The zero value is
// ready.
type responseStore struct {
	mu      sync.Mutex
	order   []string // least recently used first
	entries map[string][]json.RawMessage
	bytes   int
}

func historyBytes(h []json.RawMessage) int {
	n := 0
	for _, m := range h {
		n += len(m)
	}
	return n
}

func (st *responseStore) get(id string) ([]json.RawMessage, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	h, ok := st.entries[id]
	if ok {
		st.touch(id)
	}
	return h, ok
}

func (st *responseStore) put(id string, history []json.RawMessage) {
	size := historyBytes(history)
	if size > responseStoreBytes {
		return // larger than the whole store: the client must send it again
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.entries == nil {
		st.entries = map[string][]json.RawMessage{}
	}
	st.entries[id] = history
	st.order = append(st.order, id)
	st.bytes += size
	for len(st.order) > responseStoreEntries || st.bytes > responseStoreBytes {
		oldest := st.order[0]
		st.order = st.order[1:]
		st.bytes -= historyBytes(st.entries[oldest])
		delete(st.entries, oldest)
	}
}

// touch moves id to the most recently used end.
func (st *responseStore) touch(id string) {
	for i, o := range st.order {
		if o == id {
			st.order = append(append(st.order[:i:i], st.order[i+1:]...), id)
			return
		}
	}
}
