package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
)

// ErrUnknownType is returned by Registry.Decode for a message type that has
// no registered Go type. A relay parks such rows at once.
var ErrUnknownType = errors.New("unknown message type")

// ErrUndecodable is returned by Registry.Decode for a payload that does not
// decode into the registered type.
var ErrUndecodable = errors.New("undecodable payload")

// Registry maps message type names to Go types. It is safe for concurrent
// use.
type Registry struct {
	mu    sync.RWMutex
	types map[string]reflect.Type
	// shapes are what Validate's fast path knows of each type; nil for a
	// type it leaves to Decode.
	shapes map[string]*shape
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{types: make(map[string]reflect.Type), shapes: make(map[string]*shape)}
}

// Register maps name to the type of sample (a struct value or pointer).
func (r *Registry) Register(name string, sample any) {
	t := reflect.TypeOf(sample)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	sh := shapeOf(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.types[name] = t
	r.shapes[name] = sh
}

// Known reports whether name is registered.
func (r *Registry) Known(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.types[name]
	return ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.types))
	for n := range r.types {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Decode decodes payload into a new value of the type registered for name.
// Unknown fields are rejected, so a payload written for another schema
// fails here rather than at the consumer.
func (r *Registry) Decode(name string, payload []byte) (any, error) {
	r.mu.RLock()
	t, ok := r.types[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, name)
	}
	v := reflect.New(t)
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUndecodable, name, err)
	}
	return v.Interface(), nil
}
