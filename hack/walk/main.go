// Command walk measures how often one claim's prepare in pkg/driver returns to a file it
// already left (issue #31): it runs one real prepare of a plain claim and one of a dynamic-MIG
// claim, each on a driver that has already prepared and unprepared another claim of its kind
// (the steady state), with every function and function literal of pkg/driver's non-test files
// instrumented, and prints each call from one file of pkg/driver into another.
//
// What it counts: a call is an entry into a function (or function literal) of a non-test file
// of pkg/driver, made on the goroutine of Driver.PrepareResourceClaims; its caller's file is
// the file of the nearest pkg/driver non-test function below it on the stack (calls through
// other packages, such as a callback from pkg/checkpoint, count as calls from the nearest
// pkg/driver frame). A cross-file call is one whose callee's file differs from its caller's;
// it is a return to a file already left when the walk has been in the callee's file before
// (driver.go, where the walk starts, included). Calls within a file and returns from calls are
// not counted. "returns" is that number; "cross" the number of cross-file calls.
//
// The instrumentation is a build overlay (go help build, -overlay): the files on disk are not
// changed, and the package is compiled with one call, walkEnter("<file>"), as the first
// statement of every function body; the test that drives the prepares is added by the overlay
// too (walk_test.go.in), so the same command measures an older tree:
//
//	go run ./hack/walk                 # this tree
//	go run ./hack/walk -C /path/to/old # another checkout of the module
package main

import (
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

//go:embed walk_test.go.in
var walkTest []byte

func main() {
	root := flag.String("C", ".", "root of the accel-dra checkout to measure")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "walk:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	pkg := filepath.Join(root, "pkg", "driver")
	tmp, err := os.MkdirTemp("", "walk-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
	if err != nil {
		return err
	}
	replace := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		out := filepath.Join(tmp, filepath.Base(f))
		if err := instrument(f, out); err != nil {
			return err
		}
		replace[f] = out
	}
	added := filepath.Join(tmp, "zz_walk_test.go")
	if err := os.WriteFile(added, walkTest, 0o644); err != nil {
		return err
	}
	replace[filepath.Join(pkg, "zz_walk_test.go")] = added
	overlay := filepath.Join(tmp, "overlay.json")
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return err
	}
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		return err
	}
	cmd := exec.Command("go", "test", "-count=1", "-overlay", overlay, "-run", "^TestWalk$", "-v", "./pkg/driver/")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// instrument writes src to dst with walkEnter("<base name>") first in every function body.
func instrument(src, dst string) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, src, nil, parser.ParseComments)
	if err != nil {
		return err
	}
	call := &ast.ExprStmt{X: &ast.CallExpr{
		Fun:  ast.NewIdent("walkEnter"),
		Args: []ast.Expr{&ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(filepath.Base(src))}},
	}}
	ast.Inspect(f, func(n ast.Node) bool {
		switch fn := n.(type) {
		case *ast.FuncDecl:
			if fn.Body != nil {
				fn.Body.List = append([]ast.Stmt{call}, fn.Body.List...)
			}
		case *ast.FuncLit:
			fn.Body.List = append([]ast.Stmt{call}, fn.Body.List...)
		}
		return true
	})
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	// Positions stay those of src where the printer can keep them; only file names matter.
	if err := printer.Fprint(out, fset, f); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
