package agent

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// maxAllocMiB bounds one /debug/alloc request (the total is the
// container's memory limit's business: reaching it is the point).
const maxAllocMiB = 4096

// allocHook is /debug/alloc (test-hooks): POST ?mib=N makes the process
// hold N MiB more, every page written so that it is resident, until the
// process ends: a memory limit reached for real, to show what an OOM kill
// of the serving process costs.
type allocHook struct {
	mu   sync.Mutex
	held [][]byte
}

func (h *allocHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	n, err := strconv.Atoi(r.URL.Query().Get("mib"))
	if err != nil || n < 1 || n > maxAllocMiB {
		http.Error(w, fmt.Sprintf("mib=%q: want 1 to %d", r.URL.Query().Get("mib"), maxAllocMiB), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for range n {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		h.held = append(h.held, b)
	}
	fmt.Fprintf(w, "holding %d MiB\n", len(h.held))
}

// socketHooks are the admin socket's extra handlers (test-hooks).
func (a *Agent) socketHooks() map[string]http.Handler {
	if !a.cfg.TestHooks {
		return nil
	}
	return map[string]http.Handler{"/debug/alloc": &allocHook{}}
}
