package cli

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/seed31b0e981/reservoir/internal/tlsclient"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/migrations"
	"github.com/seed31b0e981/reservoir/mysqlstore"
)

const migrateSynopsis = "migrate up|status (--topology FILE | --dsn DSN --set pod|control|both) [--tls-ca FILE] [--create]\n\n" +
	"Each database gets the migration set of its role: a pod's database the pod set (the ledger, the unit pool,\n" +
	"holds, claims, fences, the change feed), the control database the control set (the comparer's and the\n" +
	"rollout's tables), one database that is both, both. With --topology every database the topology names is\n" +
	"migrated with its set, the control database first. A database migrated by a release before the split\n" +
	"(goose_db_version) is adopted: its versions are recorded per set, and another role's tables are dropped\n" +
	"when every one is empty, kept (and listed) when one holds rows (docs/deploy.md)."

// migrateTarget is one database to migrate and the sets it gets.
type migrateTarget struct {
	what  string // names it in output and errors, never by its DSN
	field string // where its DSN comes from: "the topology's pods[0].mysql_dsn", "--dsn"
	dsn   string
	sets  []*migrations.Set
}

func runMigrate(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("migrate", migrateSynopsis, out)
	topoPath := topologyFlag(fs)
	dsn := envString(fs, "dsn", "RESERVOIR_DSN",
		"one database's MySQL `DSN`, e.g. root@tcp(127.0.0.1:33306)/reservoir; needs --set")
	setName := fs.String("set", "", "the migration `SET` of --dsn's database: pod (a pod's mysql_dsn), control (the control_dsn) "+
		"or both (one database that is both); required with --dsn, refused with --topology, which knows each database's")
	caFile := fs.String("tls-ca", "", "verify the server's TLS certificate against this CA `FILE` (PEM), with --dsn "+
		"(with --topology the topology's mysql_tls_ca and control_tls_ca apply)")
	create := fs.Bool("create", false, "create each database first if it does not exist")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	actions := []string{"up", "status"}
	switch {
	case fs.NArg() == 0:
		return usagef("no action: give up or status")
	case !slices.Contains(actions, fs.Arg(0)):
		return unknownAction(fs.Arg(0), actions)
	case fs.NArg() > 1:
		return usagef("unexpected argument %q", fs.Arg(1))
	}
	byTopology, err := migrateSource(fs, *topoPath, *dsn)
	if err != nil {
		return err
	}
	var targets []migrateTarget
	if byTopology {
		switch {
		case *setName != "":
			return usagef("--set is for --dsn: with --topology each database gets the set of its role (control_dsn the control set, each mysql_dsn the pod set)")
		case *caFile != "":
			return usagef("--tls-ca is for --dsn: with --topology the topology's control_tls_ca and mysql_tls_ca apply")
		}
		topo, err := topology.Load(*topoPath)
		if err != nil {
			return err
		}
		if targets, err = topologyTargets(topo); err != nil {
			return err
		}
	} else {
		if *setName == "" {
			return usagef("--set is required with --dsn: pod (a pod's mysql_dsn), control (the control_dsn) or both (one database that is both); " +
				"or give --topology FILE, which knows each database's")
		}
		if err := oneOf("set", *setName, "pod", "control", "both"); err != nil {
			return err
		}
		sets, err := migrations.ParseSets(*setName)
		if err != nil {
			return usagef("--set: %v", err)
		}
		d := *dsn
		if *caFile != "" {
			if d, err = tlsclient.MySQLDSN(d, *caFile); err != nil {
				return fmt.Errorf("--tls-ca: %w", err)
			}
		}
		targets = []migrateTarget{{what: "--dsn's database", field: "--dsn", dsn: d, sets: sets}}
	}
	for _, tg := range targets {
		prefix := ""
		if byTopology {
			prefix = tg.what + ": "
		}
		if err := migrateOne(ctx, tg, fs.Arg(0), *create, &prefixWriter{w: out, prefix: prefix}); err != nil {
			if byTopology {
				return fmt.Errorf("%s: %w", tg.what, err)
			}
			return err
		}
	}
	return nil
}

// migrateSource decides between --topology and --dsn (each may come from
// its variable): a flag given on the command line wins over the other's
// variable; both given, or neither, is a usage error naming the flags.
func migrateSource(fs *flag.FlagSet, topo, dsn string) (byTopology bool, err error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case given["topology"] && given["dsn"]:
		return false, usagef("give --topology or --dsn, not both")
	case given["topology"]:
		return true, requireTopology(topo)
	case given["dsn"]:
		if dsn == "" {
			return false, usagef("no database: --dsn is empty; give --dsn DSN with --set pod|control|both, or --topology FILE")
		}
		return false, nil
	case topo != "" && dsn != "":
		return false, usagef("RESERVOIR_TOPOLOGY and RESERVOIR_DSN are both set: say which with --topology FILE or --dsn DSN")
	case topo != "":
		return true, nil
	case dsn != "":
		return false, nil
	}
	return false, usagef("no database: give --topology FILE (every database it names) or --dsn DSN with --set pod|control|both, " +
		"or set RESERVOIR_TOPOLOGY or RESERVOIR_DSN")
}

// topologyTargets lists the topology's databases, the control database
// first, then the pods in file order, each with its set. A database named
// twice (the same address and database name, whatever the user or
// parameters) is one target with both roles' sets. Errors name the
// topology's field, never the DSN.
func topologyTargets(topo *topology.Config) ([]migrateTarget, error) {
	var out []migrateTarget
	at := map[string]int{}
	add := func(what, field, dsn, caField, ca string, set *migrations.Set) error {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return fmt.Errorf("topology: %s does not parse as a DSN", field)
		}
		if cfg.DBName == "" {
			return fmt.Errorf("topology: %s names no database", field)
		}
		if ca != "" {
			if dsn, err = tlsclient.MySQLDSN(dsn, ca); err != nil {
				return fmt.Errorf("topology: %s: %w", caField, err)
			}
		}
		key := cfg.Net + "(" + cfg.Addr + ")/" + cfg.DBName
		if i, ok := at[key]; ok {
			out[i].what += " and " + what
			out[i].field += " and " + field
			if !slices.Contains(out[i].sets, set) {
				out[i].sets = append(out[i].sets, set)
			}
			return nil
		}
		at[key] = len(out)
		out = append(out, migrateTarget{what: what, field: "the topology's " + field, dsn: dsn, sets: []*migrations.Set{set}})
		return nil
	}
	if err := add("the control database", "control_dsn", topo.ControlDSN, "control_tls_ca", topo.ControlTLSCA, migrations.Control); err != nil {
		return nil, err
	}
	for i, p := range topo.Pods {
		if err := add("pod "+p.Name+"'s database", fmt.Sprintf("pods[%d].mysql_dsn", i), p.MySQLDSN, fmt.Sprintf("pods[%d].mysql_tls_ca", i), p.MySQLTLSCA, migrations.Pod); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// migrateOne runs action (up or status) on one database.
func migrateOne(ctx context.Context, tg migrateTarget, action string, create bool, out io.Writer) error {
	if create {
		if err := createDatabase(ctx, tg.dsn); err != nil {
			return err
		}
	}
	db, err := mysqlstore.Open(tg.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot connect (check %s): %w", tg.field, err)
	}
	if action == "status" {
		return migrateStatus(ctx, db, tg.sets, out)
	}
	res, err := migrations.Up(ctx, db, tg.sets...)
	printUp(out, res)
	return err
}

// printUp says what Up did, in the order it did it.
func printUp(out io.Writer, res migrations.Result) {
	for _, s := range migrations.Sets() {
		var vs []string
		for _, v := range res.Adopted {
			if v.Set == s {
				vs = append(vs, fmt.Sprintf("%05d", v.Version))
			}
		}
		if len(vs) > 0 {
			fmt.Fprintf(out, "adopted the %s migrations %s from %s (a release before the split) into %s\n",
				s, strings.Join(vs, ", "), migrations.LegacyTable, s.Table())
		}
	}
	for _, l := range res.Leftovers {
		if l.Dropped {
			fmt.Fprintf(out, "dropped the %s tables a release before the split made here, all empty: %s\n", l.Set, strings.Join(l.Tables, ", "))
			continue
		}
		fmt.Fprintf(out, "kept the %s tables a release before the split made here, because %s holds rows: %s. "+
			"If this database is also the %s database, migrate it with --set both (with --topology, name it in both places); "+
			"if not, check them and drop them by hand (docs/deploy.md)\n",
			l.Set, strings.Join(l.NotEmpty, ", "), strings.Join(l.Tables, ", "), roleOf(l.Set))
	}
	for _, v := range res.Applied {
		fmt.Fprintf(out, "applied migration %05d (%s)\n", v.Version, v.Set)
	}
	if len(res.Applied)+len(res.Adopted) == 0 {
		fmt.Fprintln(out, "schema is up to date")
	}
}

// roleOf names the database a set is for, in a sentence.
func roleOf(s *migrations.Set) string {
	if s == migrations.Control {
		return "control"
	}
	return "a pod's"
}

// migrateStatus lists each set's migrations, applied or pending, from the
// version tables alone: it creates nothing, unlike goose's own status.
func migrateStatus(ctx context.Context, db *sql.DB, sets []*migrations.Set, out io.Writer) error {
	for _, s := range sets {
		st, err := s.Check(ctx, db)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		fmt.Fprintf(out, "%s set (%s):\n", s, s.Table())
		pending := map[int64]bool{}
		for _, v := range st.Pending {
			pending[v] = true
		}
		for _, v := range s.Versions() {
			state := "applied"
			if pending[v] {
				state = "pending"
			}
			fmt.Fprintf(out, "%05d  %-8s  %s/%s\n", v, state, s, s.Path(v))
		}
		for _, v := range st.Unknown {
			fmt.Fprintf(out, "%05d  %-8s  (not in this binary: a newer one migrated this database)\n", v, "applied")
		}
		if st.Legacy > 0 {
			fmt.Fprintf(out, "not adopted yet: %s records a release before the split at %05d; `reservoir migrate ... up` adopts it\n",
				migrations.LegacyTable, st.Legacy)
		}
	}
	return nil
}

// prefixWriter starts every line written to w with prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
	mid    bool // within a line
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if p.prefix == "" {
		return p.w.Write(b)
	}
	var buf []byte
	for _, c := range b {
		if !p.mid {
			buf = append(buf, p.prefix...)
		}
		buf = append(buf, c)
		p.mid = c != '\n'
	}
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(b), nil
}

// createDatabase creates the DSN's database on its server if missing. The
// name comes from the operator's DSN; it is quoted as an identifier.
func createDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("--create: the DSN does not parse: %w", err)
	}
	name := cfg.DBName
	if name == "" {
		return fmt.Errorf("--create needs a database name in the DSN")
	}
	cfg.DBName = ""
	db, err := mysqlstore.Open(cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quoteIdent(name)); err != nil { //sqlcheck:ok a database name cannot be a parameter; quoteIdent quotes it
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func quoteIdent(s string) string {
	out := []byte{'`'}
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			out = append(out, '`')
		}
		out = append(out, s[i])
	}
	return string(append(out, '`'))
}
