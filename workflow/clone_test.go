package workflow_test

import (
	"reflect"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// fill sets every field reachable from v to a value other than its zero: pointers allocated,
// slices and maps with one item, so that a field Clone forgets to copy deeply is shared.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				t.Fatalf("%s has an unexported field %s: teach this test to reach it", v.Type(), v.Type().Field(i).Name)
			}
			fill(t, v.Field(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k)
		fill(t, e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("a field of kind %s: teach this test to fill it", v.Kind())
	}
}

// mutate changes, in place, every value reachable from v that a shallow copy would share:
// through pointers, slices and maps (a map's values are written back, and a key added).
func mutate(t *testing.T, v reflect.Value, shared bool) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			mutate(t, v.Elem(), true)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			mutate(t, v.Field(i), shared)
		}
	case reflect.Slice:
		for i := range v.Len() {
			mutate(t, v.Index(i), true)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			mutate(t, e, true)
			v.SetMapIndex(k, e)
		}
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, e)
		k.SetString("added")
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString(v.String() + "!")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	}
}

// TestCloneDeep fills every field of a Definition, at every level, clones it, changes every
// value of the clone, and checks that the original did not change: a field added to any type
// of the definition that Clone does not copy deeply fails it.
func TestCloneDeep(t *testing.T) {
	var orig, want workflow.Definition
	fill(t, reflect.ValueOf(&orig).Elem())
	fill(t, reflect.ValueOf(&want).Elem())
	c := orig.Clone()
	if !reflect.DeepEqual(c, &orig) {
		t.Fatalf("the clone differs from the original:\n%+v\n%+v", c, &orig)
	}
	mutate(t, reflect.ValueOf(c).Elem(), false)
	if !reflect.DeepEqual(&orig, &want) {
		t.Errorf("changing the clone changed the original:\n got %+v\nwant %+v", &orig, &want)
	}
	if reflect.DeepEqual(c, &orig) {
		t.Error("the clone did not change: the test changes nothing")
	}
}

// TestCloneNil checks that nil, empty and absent parts keep their form: a nil slice or map
// stays nil (canonical JSON leaves it out), an empty one stays empty.
func TestCloneNil(t *testing.T) {
	if (*workflow.Definition)(nil).Clone() != nil {
		t.Error("a nil definition cloned to a non-nil one")
	}
	for _, d := range []*workflow.Definition{
		{Name: "a"},
		{Name: "b", Steps: []workflow.Step{}, Models: map[string]workflow.ModelDef{}, Edges: []workflow.Edge{}},
	} {
		if c := d.Clone(); !reflect.DeepEqual(c, d) {
			t.Errorf("clone of %+v is %+v", d, c)
		}
	}
}
