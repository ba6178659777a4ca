// Command apifields reads one Go file of k8s.io/api (resource/<version>/types.go, its path
// as {"file": ...} on the standard input) and prints, as one JSON object, every struct type
// it declares: for each member its JSON name, its +featureGate tags and its JSON type. It
// parses the source, because the gates are comments; tests/core/test_field_table.py reads it.
package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
)

type member struct {
	Name  string   `json:"name"`
	Gates []string `json:"gates"`
	Type  string   `json:"type"`
}

func main() {
	var request struct {
		File string `json:"file"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&request); err != nil {
		fail(err)
	}
	file, err := parser.ParseFile(token.NewFileSet(), request.File, nil, parser.ParseComments)
	if err != nil {
		fail(err)
	}
	named := map[string]ast.Expr{}
	structs := map[string]*ast.StructType{}
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.TYPE {
			continue
		}
		for _, spec := range gen.Specs {
			ts := spec.(*ast.TypeSpec)
			named[ts.Name.Name] = ts.Type
			if st, ok := ts.Type.(*ast.StructType); ok {
				structs[ts.Name.Name] = st
			}
		}
	}
	out := map[string][]member{}
	for name, st := range structs {
		members := []member{}
		for _, field := range st.Fields.List {
			if field.Tag == nil {
				continue
			}
			tag := reflect.StructTag(strings.Trim(field.Tag.Value, "`")).Get("json")
			jsonName := strings.Split(tag, ",")[0]
			if jsonName == "" || jsonName == "-" {
				continue // inlined (TypeMeta) or not serialised
			}
			members = append(members, member{jsonName, gates(field.Doc), jsonType(field.Type, named)})
		}
		out[name] = members
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

// gates: the feature gates of a member's +featureGate tags, in the order written.
func gates(doc *ast.CommentGroup) []string {
	out := []string{}
	if doc == nil {
		return out
	}
	for _, c := range doc.List {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(c.Text, "//")), "+featureGate="); ok {
			out = append(out, strings.Split(rest, ",")...)
		}
	}
	return out
}

// jsonType: string, bool, int, list, map or object, through pointers and the file's own
// named types (FullyQualifiedName is a string).
func jsonType(expr ast.Expr, named map[string]ast.Expr) string {
	switch t := expr.(type) {
	case *ast.StarExpr:
		return jsonType(t.X, named)
	case *ast.ArrayType:
		return "list"
	case *ast.MapType:
		return "map"
	case *ast.SelectorExpr:
		if fmt.Sprintf("%s.%s", t.X, t.Sel.Name) == "resource.Quantity" {
			return "string" // a quantity is written as its string
		}
		return "object"
	case *ast.Ident:
		switch t.Name {
		case "string":
			return "string"
		case "bool":
			return "bool"
		case "int", "int32", "int64":
			return "int"
		}
		if underlying, ok := named[t.Name]; ok {
			return jsonType(underlying, named)
		}
	}
	return "object"
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
