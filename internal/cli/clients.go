package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/server"
)

// runClients manages the checkout API's client credentials. Its one
// action, new, makes a token: it prints the token once, for the client,
// and the clients file entry that accepts it (only the token's digest),
// for the operator to append to the file serve --clients reads.
func runClients(_ context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("clients new", "clients new --name NAME --roles checkout[,inventory] [--shops ID,ID...] [--append FILE]", out)
	name := fs.String("name", "", "the client's `NAME`, for logs (required; letters, digits, '.', '_', '-')")
	roles := fs.String("roles", "", "the client's `ROLES`, comma-separated: checkout (reserve, get, claim, release, availability) and/or inventory (adjust, availability) (required)")
	shops := fs.String("shops", "", "the shops the client may touch, comma-separated `IDS` (default: every shop)")
	appendTo := fs.String("append", "", "append the entry to this clients `FILE` (created with mode 0600 if missing) instead of printing it")
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
	case *name == "" || *roles == "":
		return inAction("new", usagef("--name and --roles are required"))
	}
	var ids []int64
	if *shops != "" {
		for _, f := range strings.Split(*shops, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || id <= 0 {
				return inAction("new", usagef("--shops: %q is not a positive shop id", f))
			}
			ids = append(ids, id)
		}
	}
	rs := strings.Split(*roles, ",")
	for i, r := range rs {
		rs[i] = strings.TrimSpace(r)
		if err := oneOf("roles", rs[i], server.RoleCheckout, server.RoleInventory); err != nil {
			return inAction("new", err)
		}
	}
	token, entry, err := server.NewClientCredential(*name, rs, ids)
	if err != nil {
		// What it refuses is the arguments (the name): bad usage.
		return inAction("new", usagef("%s", strings.Replace(err.Error(), "clients: new client.", "--", 1)))
	}
	if *appendTo != "" {
		if err := appendEntry(*appendTo, entry, func(b []byte) error { _, err := server.ParseClients(b); return err }); err != nil {
			return fmt.Errorf("--append: %w", err)
		}
		fmt.Fprintf(errOut, "client %q added to %s; restart or roll the replicas that read it. Its token (shown once; the client sends Authorization: Bearer <token>):\n", *name, *appendTo)
		fmt.Fprintln(out, token)
		return nil
	}
	fmt.Fprintf(errOut, "The client's token (shown once; the client sends it as Authorization: Bearer <token>):\n")
	fmt.Fprintln(out, token)
	fmt.Fprintf(errOut, "\nAppend this entry to the clients file that serve --clients reads (it holds only the token's digest), then restart or roll the replicas:\n\n%s", entry)
	return nil
}

// appendEntry appends entry to the clients or operators file at path,
// refusing a result that would not load (check, the file's parser, says:
// a duplicate name, say): the file is left as it was.
func appendEntry(path, entry string, check func([]byte) error) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	next := string(old)
	if next != "" && !strings.HasSuffix(next, "\n") {
		next += "\n"
	}
	if next != "" {
		next += "\n"
	}
	next += entry
	if err := check([]byte(next)); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(next[len(old):])
	return errors.Join(err, f.Close())
}
