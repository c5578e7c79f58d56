package client

import (
	"fmt"
	"testing"
)

// definitionNames holds at most maxDefinitionNames versions, forgetting the first remembered.
func TestDefinitionNamesBounded(t *testing.T) {
	var d definitionNames
	key := func(i int) registeredVersion { return registeredVersion{"w", i + 1, fmt.Sprint("h", i)} }
	for i := range maxDefinitionNames + 1 {
		d.put(key(i), fmt.Sprint("def", i))
	}
	if _, ok := d.get(key(0)); ok {
		t.Errorf("the first version is still remembered past the bound")
	}
	if name, ok := d.get(key(maxDefinitionNames)); !ok || name != fmt.Sprint("def", maxDefinitionNames) {
		t.Errorf("the last version: %q, %v", name, ok)
	}
	if len(d.names) != maxDefinitionNames || len(d.order) != maxDefinitionNames {
		t.Errorf("%d names, %d in order; want %d", len(d.names), len(d.order), maxDefinitionNames)
	}
}
