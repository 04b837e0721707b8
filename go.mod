module github.com/allot-io/allot

go 1.26.0

require (
	golang.org/x/time v0.16.0
	pgregory.net/rapid v1.3.0
)
