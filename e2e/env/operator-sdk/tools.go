//go:build tools

// Pins the operator-sdk command this module builds.
package tools

import _ "github.com/operator-framework/operator-sdk/cmd/operator-sdk"
