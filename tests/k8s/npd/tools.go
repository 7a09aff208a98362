//go:build tools

// Package tools names the commands tests/k8s/build.sh builds (node-problem-detector, and its
// health-checker, run beside pleg-guard on the real node), so `go mod tidy` keeps them.
package tools

import (
	_ "k8s.io/node-problem-detector/cmd/healthchecker"
	_ "k8s.io/node-problem-detector/cmd/nodeproblemdetector"
)
