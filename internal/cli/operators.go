package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/server"
)

// runOperators manages the admin API's operator credentials, as
// runClients does the checkout API's. Its one action, new, makes a token:
// it prints the token once, for the operator, and the operators file
// entry that accepts it (only the token's digest), for whoever keeps the
// file serve --operators reads.
func runOperators(_ context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("operators new", "operators new --name NAME --role viewer|operator|admin [--append FILE]", out)
	name := fs.String("name", "", "the operator's `NAME`, which the audit records for their changes (required; letters, digits, '.', '_', '-')")
	role := fs.String("role", "", "the operator's `ROLE`: viewer (reads), operator (viewer + the kill switch and reconcile reports) or admin (everything) (required)")
	appendTo := fs.String("append", "", "append the entry to this operators `FILE` (created with mode 0600 if missing) instead of printing it")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return usagef("no action: give new")
	case fs.Arg(0) != "new":
		return unknownAction(fs.Arg(0), []string{"new"})
	case fs.NArg() > 1:
		return inAction("new", usagef("unexpected argument %q", fs.Arg(1)))
	case *name == "" || *role == "":
		return inAction("new", usagef("--name and --role are required"))
	}
	if err := oneOf("role", *role, server.RoleViewer, server.RoleOperator, server.RoleAdmin); err != nil {
		return inAction("new", err)
	}
	token, entry, err := server.NewOperatorCredential(*name, *role)
	if err != nil {
		// What it refuses is the arguments (the name): bad usage.
		return inAction("new", usagef("%s", strings.Replace(err.Error(), "operators: new operator.", "--", 1)))
	}
	if *appendTo != "" {
		if err := appendEntry(*appendTo, entry, func(b []byte) error { _, err := server.ParseOperators(b); return err }); err != nil {
			return fmt.Errorf("--append: %w", err)
		}
		fmt.Fprintf(errOut, "operator %q added to %s; the replicas that read it reload it on change (or on SIGHUP). Their token (shown once; sent as Authorization: Bearer <token>):\n", *name, *appendTo)
		fmt.Fprintln(out, token)
		return nil
	}
	fmt.Fprintf(errOut, "The operator's token (shown once; they send it as Authorization: Bearer <token>):\n")
	fmt.Fprintln(out, token)
	fmt.Fprintf(errOut, "\nAppend this entry to the operators file that serve --operators reads (it holds only the token's digest); the replicas reload it on change, or on SIGHUP:\n\n%s", entry)
	return nil
}
