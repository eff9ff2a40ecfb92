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
// that response as chat messages and its output items by id, least recently used first
// out. The zero value is ready.
type responseStore struct {
	mu      sync.Mutex
	order   []string // least recently used first
	entries map[string]storedResponse
	itemOf  map[string]string // output item id -> response id
	bytes   int
}

type storedResponse struct {
	history []json.RawMessage
	items   map[string]inputItem
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
	e, ok := st.entries[id]
	if ok {
		st.touch(id)
	}
	return e.history, ok
}

// item finds an output item of a stored response.
func (st *responseStore) item(id string) (inputItem, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	resp, ok := st.itemOf[id]
	if !ok {
		return inputItem{}, false
	}
	st.touch(resp)
	return st.entries[resp].items[id], true
}

func (st *responseStore) put(id string, history []json.RawMessage, items map[string]inputItem) {
	size := historyBytes(history)
	for _, it := range items {
		size += len(it.text) + len(it.arguments)
	}
	if size > responseStoreBytes {
		return // larger than the whole store: the client must send it again
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.entries == nil {
		st.entries, st.itemOf = map[string]storedResponse{}, map[string]string{}
	}
	st.entries[id] = storedResponse{history: history, items: items, bytes: size}
	for itemID := range items {
		st.itemOf[itemID] = id
	}
	st.order = append(st.order, id)
	st.bytes += size
	for len(st.order) > responseStoreEntries || st.bytes > responseStoreBytes {
		oldest := st.order[0]
		st.order = st.order[1:]
		st.bytes -= st.entries[oldest].bytes
		for itemID := range st.entries[oldest].items {
			delete(st.itemOf, itemID)
		}
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
