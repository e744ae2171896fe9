//go:build tools

// Pins the kustomize command this module builds.
package tools

import _ "sigs.k8s.io/kustomize/v3/cmd/kustomize"
