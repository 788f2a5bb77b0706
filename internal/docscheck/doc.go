// Package docscheck holds the test that keeps the Go code of the README
// and of the guides in docs/ compiled: every ```go block there is preceded
// by a marker naming the function of a _test.go file that holds the same
// code,
//
//	<!-- example: DIR NAME -->
//
// where DIR is a folder relative to the repository's root and NAME an
// Example function, whose body the block must equal, or a method
// (Type.Method), whose whole declaration the block must equal (a model's
// GORM hook, say). The comparison ignores the common indentation, with
// tabs counted as four spaces, and trailing blanks. go test compiles the
// functions (and runs the Examples that have an Output comment): those of
// the core module here, those of a module of its own (a broker adapter)
// in that module.
//
// A second test checks the relative links of those pages (and of
// ARCHITECTURE.md, CHANGELOG.md and the other Markdown pages): the file
// exists, and an anchor names a heading of the page it points to.
package docscheck
