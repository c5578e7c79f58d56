package workflow

import (
	"sort"
	"strconv"

	"github.com/pelletier/go-toml/v2/unstable"
)

// keyPositions walks the TOML document with go-toml's position-bearing parser and returns the
// 1-based line of every key it defines, addressed like Source.Lines ("steps[2].handler",
// "models.writer.provider", "tools.t.mock[0].output"). A key defined implicitly (the "models" of
// a [models.writer] header) gets the line where it first appears. The document must already be
// known to be valid TOML; the walk only records positions and reports nothing. It also returns
// the byte offset of each key, which orders the keys of one line.
func keyPositions(data []byte) (lines, offsets map[string]int) {
	w := lineWalker{
		lines:   map[string]int{},
		offsets: map[string]int{},
		arrays:  map[string]int{},
	}
	w.starts = append(w.starts, 0)
	for i, c := range data {
		if c == '\n' {
			w.starts = append(w.starts, i+1)
		}
	}
	var p unstable.Parser
	p.Reset(data)
	table := ""
	for p.NextExpression() {
		e := p.Expression()
		if e == nil {
			continue
		}
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = w.header(e)
		case unstable.KeyValue:
			w.keyValue(table, e)
		}
	}
	return w.lines, w.offsets
}

type lineWalker struct {
	starts  []int          // byte offset of the start of each line
	lines   map[string]int // key path → line
	offsets map[string]int // key path → byte offset
	arrays  map[string]int // array-of-tables path → number of elements so far
}

// line returns the 1-based line of a byte offset.
func (w *lineWalker) line(offset uint32) int {
	// The number of line starts at or before offset.
	return sort.Search(len(w.starts), func(i int) bool { return w.starts[i] > int(offset) })
}

// set records the position of path unless it already has one.
func (w *lineWalker) set(path string, offset uint32) {
	if _, ok := w.lines[path]; !ok {
		w.lines[path] = w.line(offset)
		w.offsets[path] = int(offset)
	}
}

// header handles a [table] or [[array.table]] header and returns the path of the table that
// the following key-values fill.
func (w *lineWalker) header(e *unstable.Node) string {
	path := ""
	it := e.Key()
	for it.Next() {
		k := it.Node()
		at := k.Raw.Offset
		path = joinKey(path, string(k.Data))
		if it.IsLast() && e.Kind == unstable.ArrayTable {
			n := w.arrays[path]
			w.arrays[path] = n + 1
			w.set(path, at)
			path = indexKey(path, n)
			w.set(path, at)
			continue
		}
		if n, ok := w.arrays[path]; ok && n > 0 {
			// [steps.retry] after [[steps]]: the last element of the array.
			w.set(path, at)
			path = indexKey(path, n-1)
		}
		w.set(path, at)
	}
	return path
}

// keyValue handles a (possibly dotted) key = value inside the table at path table.
func (w *lineWalker) keyValue(table string, e *unstable.Node) {
	path := table
	var at uint32
	it := e.Key()
	for it.Next() {
		k := it.Node()
		at = k.Raw.Offset
		path = joinKey(path, string(k.Data))
		w.set(path, at)
	}
	w.value(path, e.Value(), at)
}

// value descends into inline tables and arrays; at is the position of the key holding v.
func (w *lineWalker) value(path string, v *unstable.Node, at uint32) {
	if !v.Valid() {
		return
	}
	switch v.Kind {
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				w.keyValue(path, kv)
			}
		}
	case unstable.Array:
		i := 0
		it := v.Children()
		for it.Next() {
			item := it.Node()
			if item.Kind == unstable.Comment {
				continue
			}
			// An item is where it starts; an array item has no position of its own, so it is
			// where its first value is, or else where the previous item was.
			if first, ok := firstOffset(item); ok {
				at = first
			}
			p := indexKey(path, i)
			w.set(p, at)
			w.value(p, item, at)
			i++
		}
	}
}

// firstOffset returns the offset of the first value in v that carries a position: v itself,
// unless it is an array (arrays carry none).
func firstOffset(v *unstable.Node) (uint32, bool) {
	for v.Valid() && v.Kind == unstable.Array {
		c := v.Child()
		for c.Valid() && c.Kind == unstable.Comment {
			c = c.Next()
		}
		v = c
	}
	if !v.Valid() {
		return 0, false
	}
	return v.Raw.Offset, true
}

// joinKey addresses key inside parent: "steps[2]" + "handler" → "steps[2].handler". A key that
// is not a bare TOML key is quoted, so that the address stays unambiguous: models."a.b".
func joinKey(parent, key string) string {
	key = keyName(key)
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// keyName writes a key as TOML would: bare when it can be, else quoted.
func keyName(key string) string {
	if key == "" {
		return `""`
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(key)
		}
	}
	return key
}

// indexKey addresses item i of the array at path: "edges" + 0 → "edges[0]".
func indexKey(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// KeyLines returns the 1-based line of every key of a valid TOML document, addressed as
// [Source.Lines] addresses them ("providers.openai.kind", "principals.alice.roles[1]"): for
// other files of reins (the operator's configuration) whose errors name lines too.
func KeyLines(data []byte) map[string]int {
	lines, _ := keyPositions(data)
	return lines
}
