package mqtest

import "sync"

// valve holds bytes back while shut: a proxied connection stays open, and carries nothing,
// as behind a network path that died without a reset.
type valve struct {
	mu   sync.Mutex
	open chan struct{} // closed while bytes flow
}

func newValve() *valve {
	v := &valve{open: make(chan struct{})}
	close(v.open)
	return v
}

// flowing is closed once bytes may flow.
func (v *valve) flowing() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.open
}

// shut holds back every byte from now on, until release.
func (v *valve) shut() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.open:
		v.open = make(chan struct{})
	default: // already shut
	}
}

// release lets bytes flow again, those held back first.
func (v *valve) release() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.open: // already flowing
	default:
		close(v.open)
	}
}
