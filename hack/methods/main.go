// Command methods counts the methods of each type declared in a package's non-test files (a
// go/ast count: every FuncDecl with a receiver, pointer or value, by the receiver's type name)
// and fails if one has more than -max (issue #31: no type in pkg/driver has more than 25):
//
//	go run ./hack/methods ./pkg/driver
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	max := flag.Int("max", 25, "the most methods a type may have")
	flag.Parse()
	dir := "./pkg/driver"
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	counts, err := count(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "methods:", err)
		os.Exit(2)
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	over := false
	for _, n := range names {
		mark := ""
		if counts[n] > *max {
			mark, over = fmt.Sprintf("  more than %d", *max), true
		}
		fmt.Printf("%3d %s%s\n", counts[n], n, mark)
	}
	if over {
		os.Exit(1)
	}
}

func count(dir string) (map[string]int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			t := fn.Recv.List[0].Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			if g, ok := t.(*ast.IndexExpr); ok {
				t = g.X
			}
			if id, ok := t.(*ast.Ident); ok {
				counts[id.Name]++
			}
		}
	}
	return counts, nil
}
