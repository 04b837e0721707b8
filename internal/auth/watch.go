package auth

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// CheckEvery is how often a watched file is looked at for changes.
const CheckEvery = time.Second

// watched holds a value parsed from files, re-read when any of them
// changes. A change that fails to parse keeps the last good value and is
// passed to onError once.
//
// A change is told by the files' contents, not their modification times:
// two writes within one tick of the kernel's clock can leave the same
// time and size. The files are small (certificates, keys, tokens) and read
// at most once per CheckEvery.
type watched[T any] struct {
	paths   []string
	parse   func(data [][]byte) (T, error)
	now     func() time.Time
	onError func(error)

	mu      sync.Mutex
	val     T
	data    [][]byte // what val was parsed from, or last refused
	checked time.Time
}

// watch reads paths and parses them; the first read must succeed.
func watch[T any](paths []string, parse func([][]byte) (T, error), onError func(error)) (*watched[T], error) {
	if onError == nil {
		onError = func(error) {}
	}
	w := &watched[T]{paths: paths, parse: parse, now: time.Now, onError: onError}
	data, err := w.read()
	if err != nil {
		return nil, err
	}
	if w.val, err = parse(data); err != nil {
		return nil, err
	}
	w.data, w.checked = data, w.now()
	return w, nil
}

func (w *watched[T]) read() ([][]byte, error) {
	data := make([][]byte, len(w.paths))
	for i, p := range w.paths {
		var err error
		if data[i], err = os.ReadFile(p); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// get returns the current value, re-reading the files first if one has
// changed since it last looked, which it does at most once per
// CheckEvery.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if now.Sub(w.checked) < CheckEvery {
		return w.val
	}
	w.checked = now
	data, err := w.read()
	if err != nil {
		// Mid-rotation (a file replaced by rename) or removed: keep the
		// last good value and look again next time.
		if !errors.Is(err, os.ErrNotExist) {
			w.onError(err)
		}
		return w.val
	}
	changed := false
	for i := range data {
		changed = changed || !bytes.Equal(data[i], w.data[i])
	}
	if !changed {
		return w.val
	}
	w.data = data // a version that fails is reported once, not every second
	val, err := w.parse(data)
	if err != nil {
		w.onError(fmt.Errorf("keeping the previous version: %w", err))
		return w.val
	}
	w.val = val
	return val
}
