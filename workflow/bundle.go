package workflow

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
)

// Bundle is what the workflows bucket stores under a definition's hash: the definition, the
// hashes of the sub-workflow files it names, and the directory its relative paths resolve
// against (cassettes of replay models, sub-workflow files).
type Bundle struct {
	Definition *Definition `json:"definition"`
	// Workflows maps each sub-workflow file the definition names (as written in it) to the
	// hash of that file's bundle.
	Workflows map[string]string `json:"workflows,omitempty"`
	// Agents maps each step the definition's agent tools run to the hash of the bundle of the
	// workflow its sub-runs run ([Definition.AgentDefinition]).
	Agents map[string]string `json:"agents,omitempty"`
	// BaseDir is the absolute directory relative paths resolve against: that of the
	// definition's file, or for a definition built in Go the base directory given to [NewBundles]
	// (by default the working directory of the process that made the bundles). "" (a bundle
	// made by hand) resolves them against the reader's working directory.
	BaseDir string `json:"base_dir,omitempty"`
}

// Resolve returns path made absolute against the bundle's BaseDir.
func (b *Bundle) Resolve(path string) string {
	if path == "" || filepath.IsAbs(path) || b.BaseDir == "" {
		return path
	}
	return filepath.Join(b.BaseDir, path)
}

// Bundles holds a definition and its sub-workflows, by hash.
type Bundles struct {
	Root string // the hash of the root definition
	All  map[string]*Bundle
}

// NewBundles returns the bundles of def, a definition that has passed workflow.Validate, and of
// every sub-workflow file it names, read (with Load) from baseDir ("" means the
// directory of def.Source.File, else the working directory).
func NewBundles(def *Definition, baseDir string) (*Bundles, error) {
	if baseDir == "" && def.Source != nil && def.Source.File != "" {
		baseDir = filepath.Dir(def.Source.File)
	}
	abs, err := filepath.Abs(baseDir)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", def.Name, err)
	}
	bs := &Bundles{All: map[string]*Bundle{}}
	bs.Root, err = bs.add(def, abs, map[string]string{}, 0)
	return bs, err
}

// add adds def and its sub-workflows; files maps absolute file names already added to hashes.
func (bs *Bundles) add(def *Definition, dir string, files map[string]string, depth int) (string, error) {
	if depth > MaxCallDepth {
		return "", fmt.Errorf("workflow %s: sub-workflows nested deeper than %d", def.Name, MaxCallDepth)
	}
	b := &Bundle{Definition: def, BaseDir: dir}
	for _, file := range subWorkflows(def) {
		path := file
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		h, ok := files[path]
		if !ok {
			sub, ps := Load(path)
			if len(ps) > 0 {
				return "", fmt.Errorf("workflow %s: sub-workflow %s: %s", def.Name, file, ps[0].String())
			}
			var err error
			if h, err = bs.add(sub, filepath.Dir(path), files, depth+1); err != nil {
				return "", err
			}
			files[path] = h
		}
		if b.Workflows == nil {
			b.Workflows = map[string]string{}
		}
		b.Workflows[file] = h
	}
	if err := bs.addAgents(b, dir, files, depth); err != nil {
		return "", err
	}
	h, err := def.Hash()
	if err != nil {
		return "", err
	}
	bs.All[h] = b
	return h, nil
}

// addAgents adds to b the bundles of the workflows its definition's agent tools run, in the
// same directory (their workflow tools' files resolve as the definition's do).
func (bs *Bundles) addAgents(b *Bundle, dir string, files map[string]string, depth int) error {
	for _, step := range b.Definition.ToolAgents() {
		sub, err := b.Definition.AgentDefinition(step)
		if err != nil {
			return err
		}
		h, err := sub.Hash()
		if err != nil {
			return err
		}
		if _, ok := bs.All[h]; !ok {
			if h, err = bs.add(sub, dir, files, depth+1); err != nil {
				return err
			}
		}
		if b.Agents == nil {
			b.Agents = map[string]string{}
		}
		b.Agents[step] = h
	}
	return nil
}

// subWorkflows lists the files a definition names: call and map workflow keys, parallel
// workflow branches and workflow tools.
func subWorkflows(def *Definition) []string {
	var files []string
	for _, name := range slices.Sorted(maps.Keys(def.Tools)) {
		if f := def.Tools[name].Workflow; f != "" {
			files = append(files, f)
		}
	}
	for _, s := range def.Steps {
		if s.Workflow != "" {
			files = append(files, s.Workflow)
		}
		for _, br := range s.Branches {
			if br.Workflow != "" {
				files = append(files, br.Workflow)
			}
		}
	}
	return files
}
