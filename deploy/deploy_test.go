package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"

	"github.com/seed31b0e981/reservoir/internal/server"
	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/rollout/authority"
	"github.com/seed31b0e981/reservoir/rollout/flagdoc"
)

// tb is what the checks need of a *testing.T; TestChecksCatchBreakage
// gives them a recorder instead, to see them fail.
type tb interface {
	Helper()
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Setenv(key, value string)
}

// repo is the repository the checks read: the files on disk, with some
// replaced by edited copies (TestChecksCatchBreakage's breakages).
type repo struct {
	root string
	edit map[string][]byte // path relative to root -> content
}

// thisRepo is the repository, from this package's directory.
var thisRepo = &repo{root: ".."}

// read returns the content of path (root-joined, as Glob returns it).
func (r *repo) read(t tb, p string) []byte {
	t.Helper()
	rel, err := filepath.Rel(r.root, p)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if b, ok := r.edit[filepath.ToSlash(rel)]; ok {
		return b
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return b
}

// The fields of a Kubernetes object the checks read. They are local and
// partial on purpose: each check reads what it needs, and a field that
// matters and is misspelt in a manifest reads as missing, so the check
// that needs it fails. TestOverlayDecodesStrictly decodes every object
// whole against the Kubernetes API's own types (k8s.io/api), where any
// misspelt field fails.

type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   metadata          `yaml:"metadata"`
	Spec       yaml.Node         `yaml:"spec"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`

	file string
}

func (o *object) String() string { return o.file + ": " + o.Kind + " " + o.Metadata.Name }

type metadata struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type deploymentSpec struct {
	Replicas int           `yaml:"replicas"`
	Selector labelSelector `yaml:"selector"`
	Strategy struct {
		Type string `yaml:"type"`
	} `yaml:"strategy"`
	Template podTemplate `yaml:"template"`
}

type jobSpec struct {
	ActiveDeadlineSeconds *int64      `yaml:"activeDeadlineSeconds"`
	Template              podTemplate `yaml:"template"`
}

type cronJobSpec struct {
	Schedule          string `yaml:"schedule"`
	ConcurrencyPolicy string `yaml:"concurrencyPolicy"`
	JobTemplate       struct {
		Spec jobSpec `yaml:"spec"`
	} `yaml:"jobTemplate"`
}

type serviceSpec struct {
	Selector                 map[string]string `yaml:"selector"`
	PublishNotReadyAddresses *bool             `yaml:"publishNotReadyAddresses"`
	Ports                    []struct {
		Name       string    `yaml:"name"`
		Port       int       `yaml:"port"`
		TargetPort yaml.Node `yaml:"targetPort"`
	} `yaml:"ports"`
}

type pdbSpec struct {
	Selector       labelSelector `yaml:"selector"`
	MaxUnavailable *int          `yaml:"maxUnavailable"`
	MinAvailable   *int          `yaml:"minAvailable"`
}

// networkPolicySpec is the whole of a NetworkPolicy's spec, decoded
// strictly (see strictly): a field misspelt here could open the admin
// port to everyone while the check read it as closed.
type networkPolicySpec struct {
	PodSelector labelSelector `yaml:"podSelector"`
	PolicyTypes []string      `yaml:"policyTypes"`
	Ingress     []struct {
		Ports []policyPort `yaml:"ports"`
		From  []policyPeer `yaml:"from"`
	} `yaml:"ingress"`
	Egress []struct {
		Ports []policyPort `yaml:"ports"`
		To    []policyPeer `yaml:"to"`
	} `yaml:"egress"`
}

type policyPort struct {
	Protocol string    `yaml:"protocol"`
	Port     yaml.Node `yaml:"port"`
	EndPort  *int      `yaml:"endPort"`
}

type policyPeer struct {
	PodSelector       *labelSelector `yaml:"podSelector"`
	NamespaceSelector *labelSelector `yaml:"namespaceSelector"`
	IPBlock           *struct {
		CIDR   string   `yaml:"cidr"`
		Except []string `yaml:"except"`
	} `yaml:"ipBlock"`
}

func (p policyPeer) String() string {
	var parts []string
	if p.NamespaceSelector != nil {
		parts = append(parts, fmt.Sprintf("namespaceSelector %v", p.NamespaceSelector.MatchLabels))
	}
	if p.PodSelector != nil {
		parts = append(parts, fmt.Sprintf("podSelector %v", p.PodSelector.MatchLabels))
	}
	if p.IPBlock != nil {
		parts = append(parts, "ipBlock "+p.IPBlock.CIDR)
	}
	if len(parts) == 0 {
		return "an empty peer"
	}
	return strings.Join(parts, " and ")
}

// strictly decodes into v and fails on any field v does not have. The
// other specs are partial on purpose; a spec whose misspelt field would
// fail open (the NetworkPolicy) is modelled whole and decoded strictly.
type strictly struct{ v any }

func (s strictly) UnmarshalYAML(n *yaml.Node) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(s.v)
}

type podTemplate struct {
	Metadata metadata `yaml:"metadata"`
	Spec     podSpec  `yaml:"spec"`
}

type podSpec struct {
	RestartPolicy                 string          `yaml:"restartPolicy"`
	TerminationGracePeriodSeconds *int            `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               securityContext `yaml:"securityContext"`
	Containers                    []container     `yaml:"containers"`
	InitContainers                []container     `yaml:"initContainers"`
	Volumes                       []volume        `yaml:"volumes"`
}

type securityContext struct {
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	RunAsUser                *int  `yaml:"runAsUser"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env       []envVar `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	StartupProbe    *probe          `yaml:"startupProbe"`
	LivenessProbe   *probe          `yaml:"livenessProbe"`
	ReadinessProbe  *probe          `yaml:"readinessProbe"`
	SecurityContext securityContext `yaml:"securityContext"`
	Lifecycle       struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef     *keyRef `yaml:"secretKeyRef"`
		ConfigMapKeyRef  *keyRef `yaml:"configMapKeyRef"`
		ResourceFieldRef *struct {
			Resource string `yaml:"resource"`
		} `yaml:"resourceFieldRef"`
	} `yaml:"valueFrom"`
}

type keyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
}

type volume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
	EmptyDir *struct{} `yaml:"emptyDir"`
}

// manifests is every object the example overlay renders (kustomize
// build deploy/kubernetes/overlays/example), and the Secrets of
// deploy/kubernetes/secrets.example.yaml, which the overlay's objects
// refer to and an installation creates from its secret store.
type manifests struct {
	objects []*object
}

func loadManifests(t tb, r *repo) *manifests {
	t.Helper()
	m := &manifests{}
	add := func(file string, i int, b []byte) {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for ; ; i++ {
			o := &object{}
			err := dec.Decode(o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
			o.file = file
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: document %d lacks apiVersion, kind or metadata.name", file, i)
				continue
			}
			if prev := m.find(o.Kind, o.Metadata.Name); prev != nil {
				t.Errorf("%s and %s both define %s %s", prev.file, o.file, o.Kind, o.Metadata.Name)
			}
			m.objects = append(m.objects, o)
		}
	}
	for i, o := range kustomize(t, r, exampleOverlay) {
		add(o.origin, i, o.yaml)
	}
	add(secretsExample, 0, r.read(t, filepath.Join(r.root, kubeDir, secretsExample)))
	return m
}

func (m *manifests) find(kind, name string) *object {
	for _, o := range m.objects {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	return nil
}

func (m *manifests) all(kind string) []*object {
	var out []*object
	for _, o := range m.objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the only object of kind, decoding its spec into spec.
func (m *manifests) one(t tb, kind string, spec any) *object {
	t.Helper()
	all := m.all(kind)
	if len(all) != 1 {
		t.Fatalf("the example overlay renders %d %s, want 1", len(all), kind)
	}
	if err := all[0].Spec.Decode(spec); err != nil {
		t.Fatalf("%s: spec: %v", all[0], err)
	}
	return all[0]
}

// keys returns the keys a ConfigMap or Secret defines, or nil when
// there is no such object.
func (m *manifests) keys(kind, name string) map[string]string {
	o := m.find(kind, name)
	if o == nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range o.Data {
		out[k] = v
	}
	for k, v := range o.StringData {
		out[k] = v
	}
	return out
}

// flagValue returns --name's value in args ("--name=v" or "--name v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		for _, prefix := range []string{"--" + name, "-" + name} {
			if v, ok := strings.CutPrefix(a, prefix+"="); ok {
				return v, true
			}
			if a == prefix && i+1 < len(args) {
				return args[i+1], true
			}
		}
	}
	return "", false
}

// portOf returns the port of a listen address such as ":8080".
func portOf(t tb, what, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: port %q", what, addr, p)
	}
	return n
}

// cliFlags returns the flags `reservoir` defines, from internal/cli's
// source: the name of every flag registered with fs.Type("name", ...) or
// fs.TypeVar(&v, "name", ...), or envString(fs, "name", ...) (--dsn,
// --topology, ...). A manifest that passes a flag the
// command does not have would crash-loop.
func cliFlags(t tb, r *repo) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(r.root, "internal", "cli", "*.go"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	def := regexp.MustCompile(`\bfs\.(?:String|Bool|Duration|Int|Int64|Uint|Float64|Var|Func|TextVar)(?:Var)?\(\s*(?:[^,()]+,\s*)?"([a-z][a-z0-9-]*)"`)
	helper := regexp.MustCompile(`\b(?:fs\.String\(|envString\(\s*fs,)\s*"([a-z][a-z0-9-]*)"`)
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b := r.read(t, f)
		for _, re := range []*regexp.Regexp{def, helper} {
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
		}
	}
	if !out["topology"] || !out["dsn"] || !out["addr"] {
		t.Fatalf("found no --topology, --dsn or --addr in internal/cli: the flag scan is broken (%v)", out)
	}
	return out
}

func checkFlagsExist(t tb, who string, args []string, known map[string]bool) {
	t.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			t.Errorf("%s passes --%s, which no reservoir command defines (internal/cli)", who, name)
		}
	}
}

// checkSecurity checks a container's effective security context (the
// container's fields over the pod's).
func checkSecurity(t tb, who string, pod securityContext, c container) {
	t.Helper()
	nonRoot := c.SecurityContext.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = pod.RunAsNonRoot
	}
	user := c.SecurityContext.RunAsUser
	if user == nil {
		user = pod.RunAsUser
	}
	switch {
	case nonRoot == nil || !*nonRoot:
		t.Errorf("%s: runAsNonRoot is not true", who)
	case user == nil || *user == 0:
		t.Errorf("%s: runAsUser is not set to a non-zero uid", who)
	}
	sc := c.SecurityContext
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", who)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem is not true", who)
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: capabilities.drop does not list ALL", who)
	}
	for _, kind := range []string{"cpu", "memory"} {
		if c.Resources.Requests[kind] == "" || c.Resources.Limits[kind] == "" {
			t.Errorf("%s: resources.requests and limits must both set %s", who, kind)
		}
	}
}

// checkRefs checks that every Secret and ConfigMap a pod uses (volumes,
// env) is in the manifests, with the key it names.
func checkRefs(t tb, m *manifests, who string, spec podSpec) {
	t.Helper()
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil && m.find("ConfigMap", v.ConfigMap.Name) == nil:
			t.Errorf("%s: volume %s mounts ConfigMap %s, which deploy/kubernetes does not define", who, v.Name, v.ConfigMap.Name)
		case v.Secret != nil && m.find("Secret", v.Secret.SecretName) == nil:
			t.Errorf("%s: volume %s mounts Secret %s, which deploy/kubernetes does not define", who, v.Name, v.Secret.SecretName)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			for kind, ref := range map[string]*keyRef{"Secret": e.ValueFrom.SecretKeyRef, "ConfigMap": e.ValueFrom.ConfigMapKeyRef} {
				if ref == nil {
					continue
				}
				keys := m.keys(kind, ref.Name)
				if keys == nil {
					t.Errorf("%s: container %s: env %s reads %s %s, which deploy/kubernetes does not define", who, c.Name, e.Name, kind, ref.Name)
				} else if _, ok := keys[ref.Key]; !ok {
					t.Errorf("%s: container %s: env %s reads key %q of %s %s, which it does not have", who, c.Name, e.Name, ref.Key, kind, ref.Name)
				}
			}
		}
		for _, vm := range c.VolumeMounts {
			if !slices.ContainsFunc(spec.Volumes, func(v volume) bool { return v.Name == vm.Name }) {
				t.Errorf("%s: container %s mounts volume %s, which the pod does not define", who, c.Name, vm.Name)
			}
		}
	}
}

// secretEnv maps each of a container's env variables filled from a
// Secret to its Secret and key.
func secretEnv(c container) map[string]keyRef {
	out := map[string]keyRef{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = *e.ValueFrom.SecretKeyRef
		}
	}
	return out
}

func subset(sub, of map[string]string) bool {
	if len(sub) == 0 {
		return false // an empty selector selects everything: never meant here
	}
	for k, v := range sub {
		if of[k] != v {
			return false
		}
	}
	return true
}

// served is what the Deployment runs, as the other checks need it.
type served struct {
	r     *repo
	m     *manifests
	dep   *object
	spec  deploymentSpec
	c     container
	ports map[string]int // container port name -> number
}

func loadServed(t tb, r *repo) *served {
	t.Helper()
	s := &served{r: r, m: loadManifests(t, r)}
	s.dep = s.m.find("Deployment", "reservoir")
	if s.dep == nil {
		t.Fatal("the example overlay renders no Deployment reservoir (reservoir serve)")
	}
	if err := s.dep.Spec.Decode(&s.spec); err != nil {
		t.Fatalf("%s: spec: %v", s.dep, err)
	}
	if len(s.spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1 (reservoir)", s.dep, len(s.spec.Template.Spec.Containers))
	}
	s.c = s.spec.Template.Spec.Containers[0]
	s.ports = map[string]int{}
	for _, p := range s.c.Ports {
		s.ports[p.Name] = p.ContainerPort
	}
	return s
}

// resolvePort resolves a probe's or a Service's port (a name or a number)
// to a container port number, or 0.
func (s *served) resolvePort(n yaml.Node) int {
	if v, err := strconv.Atoi(n.Value); err == nil {
		for _, p := range s.ports {
			if p == v {
				return v
			}
		}
		return 0
	}
	return s.ports[n.Value]
}

// TestDeployment checks what a broken Deployment would cost in production:
// ports, probes, the non-root user, resources, the grace period, the flags
// of serve, and the secrets and config it reads.
func TestDeployment(t *testing.T) { checkDeployment(t, thisRepo) }

func checkDeployment(t tb, r *repo) {
	s := loadServed(t, r)
	who := s.dep.String()
	if s.spec.Replicas < 2 {
		t.Errorf("%s: replicas %d: one replica is an outage at every rollout", who, s.spec.Replicas)
	}
	if !subset(s.spec.Selector.MatchLabels, s.spec.Template.Metadata.Labels) {
		t.Errorf("%s: selector %v does not select the template's labels %v", who, s.spec.Selector.MatchLabels, s.spec.Template.Metadata.Labels)
	}

	// Ports: the checkout API on --addr, the admin listener on --admin-addr.
	args := slices.Concat(s.c.Command, s.c.Args)
	if len(s.c.Args) == 0 || s.c.Args[0] != "serve" {
		t.Fatalf("%s: args %v do not start with serve", who, s.c.Args)
	}
	checkFlagsExist(t, who, args, cliFlags(t, r))
	want := map[string]int{"checkout": 8080, "admin": 8081}
	for name, port := range want {
		if s.ports[name] != port {
			t.Errorf("%s: container port %q is %d, want %d", who, name, s.ports[name], port)
		}
	}
	for flag, name := range map[string]string{"addr": "checkout", "admin-addr": "admin"} {
		v, ok := flagValue(args, flag)
		if !ok {
			t.Errorf("%s: serve has no --%s: its default listens on 127.0.0.1 only, unreachable from the kubelet and the Service", who, flag)
			continue
		}
		if p := portOf(t, "--"+flag, v); p != s.ports[name] {
			t.Errorf("%s: --%s %s listens on %d, but container port %q is %d", who, flag, v, p, name, s.ports[name])
		}
	}

	// Probes: on the admin port, never the checkout one (a checkout flood
	// must not fail them); liveness checks the process only.
	for _, p := range []struct {
		name, path string
		probe      *probe
		required   bool
	}{
		{"livenessProbe", "/healthz", s.c.LivenessProbe, true},
		{"readinessProbe", "/readyz", s.c.ReadinessProbe, true},
		{"startupProbe", "/healthz", s.c.StartupProbe, false},
	} {
		switch {
		case p.probe == nil && p.required:
			t.Errorf("%s: no %s", who, p.name)
		case p.probe == nil:
		case p.probe.HTTPGet == nil:
			t.Errorf("%s: %s is not an httpGet", who, p.name)
		case p.probe.HTTPGet.Path != p.path:
			t.Errorf("%s: %s hits %s, want %s", who, p.name, p.probe.HTTPGet.Path, p.path)
		case s.resolvePort(p.probe.HTTPGet.Port) != s.ports["admin"]:
			t.Errorf("%s: %s hits port %q, want the admin port (%d)", who, p.name, p.probe.HTTPGet.Port.Value, s.ports["admin"])
		}
	}

	checkSecurity(t, who, s.spec.Template.Spec.SecurityContext, s.c)
	checkRefs(t, s.m, who, s.spec.Template.Spec)

	// Grace: the kubelet's SIGKILL must come after the preStop pause, the
	// requests in flight (--shutdown-timeout) and the shadow calls and the
	// comparer's last flush (--drain-timeout).
	budget := time.Duration(0)
	for flag, def := range map[string]time.Duration{"shutdown-timeout": 15 * time.Second, "drain-timeout": 10 * time.Second} {
		d := def
		if v, ok := flagValue(args, flag); ok {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				t.Fatalf("%s: --%s %q: %v", who, flag, v, err)
			}
		}
		budget += d
	}
	if ps := s.c.Lifecycle.PreStop; ps != nil && ps.Sleep != nil {
		budget += time.Duration(ps.Sleep.Seconds) * time.Second
	}
	grace := s.spec.Template.Spec.TerminationGracePeriodSeconds
	switch {
	case grace == nil:
		t.Errorf("%s: no terminationGracePeriodSeconds: the default 30s", who)
	case time.Duration(*grace)*time.Second <= budget || *grace <= 25:
		t.Errorf("%s: terminationGracePeriodSeconds %d is not above preStop + --shutdown-timeout + --drain-timeout (%s)", who, *grace, budget)
	}

	// Files: the topology and the clients where serve looks for them, each
	// as a whole directory (a subPath mount never sees a new version of
	// its ConfigMap or Secret).
	mounts := map[string]string{}
	for _, vm := range s.c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
		if vm.SubPath != "" {
			t.Errorf("%s: volume %s is mounted with subPath %s: it would never see an update", who, vm.Name, vm.SubPath)
		}
	}
	for _, f := range []struct{ flag, kind string }{{"topology", "ConfigMap"}, {"clients", "Secret"}, {"operators", "Secret"}} {
		v, ok := flagValue(args, f.flag)
		if !ok {
			t.Errorf("%s: serve has no --%s", who, f.flag)
			continue
		}
		if !s.fileExists(v, f.kind) {
			t.Errorf("%s: --%s %s is not a key of a %s mounted at its directory", who, f.flag, v, f.kind)
		}
	}
	env := secretEnv(s.c)
	if ref, ok := env["RESERVOIR_ADMIN_TOKEN"]; !ok {
		t.Errorf("%s: $RESERVOIR_ADMIN_TOKEN does not come from a Secret: the admin API would be disabled", who)
	} else if tok := s.m.keys("Secret", ref.Name)[ref.Key]; len(tok) < 16 {
		t.Errorf("%s: the example admin token is %d bytes; serve refuses one under 16", who, len(tok))
	}
	if _, ok := flagValue(args, "admin-token-file"); ok {
		t.Logf("%s: --admin-token-file is set; $RESERVOIR_ADMIN_TOKEN is then ignored", who)
	}
	if _, ok := flagValue(args, "insecure-no-auth"); ok || slices.Contains(args, "--insecure-no-auth") {
		t.Errorf("%s: --insecure-no-auth serves the checkout API to anyone", who)
	}
}

// fileExists reports whether path is a key of a ConfigMap or Secret (kind)
// mounted at path's directory in the Deployment's container.
func (s *served) fileExists(p, kind string) bool {
	_, ok := mounted(s.m, s.spec.Template.Spec, s.c, p, kind)
	return ok
}

// mounted returns the content of the file at path p in container c of a
// pod (spec): a key of the ConfigMap or Secret (kind) mounted at p's
// directory. ok is false when p is no such key.
func mounted(m *manifests, spec podSpec, c container, p, kind string) (content string, ok bool) {
	dir, file := path.Split(p)
	for _, vm := range c.VolumeMounts {
		if strings.TrimSuffix(vm.MountPath, "/")+"/" != dir {
			continue
		}
		for _, v := range spec.Volumes {
			switch {
			case v.Name != vm.Name:
			case kind == "ConfigMap" && v.ConfigMap != nil:
				content, ok = m.keys("ConfigMap", v.ConfigMap.Name)[file]
				return content, ok
			case kind == "Secret" && v.Secret != nil:
				content, ok = m.keys("Secret", v.Secret.SecretName)[file]
				return content, ok
			}
		}
	}
	return "", false
}

// The Services reach the container's two ports, each by name, on the same
// numbers, and select the Deployment's pods; together they expose every
// port the container has.
func TestServices(t *testing.T) { checkServices(t, thisRepo) }

func checkServices(t tb, r *repo) {
	s := loadServed(t, r)
	svcs := s.m.all("Service")
	if len(svcs) == 0 {
		t.Fatal("deploy/kubernetes has no Service")
	}
	exposed := map[int]bool{}
	for _, o := range svcs {
		var spec serviceSpec
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		if !subset(spec.Selector, s.spec.Template.Metadata.Labels) {
			t.Errorf("%s: selector %v does not select the Deployment's pods %v", o, spec.Selector, s.spec.Template.Metadata.Labels)
		}
		reaches := map[int]bool{}
		for _, p := range spec.Ports {
			target := s.resolvePort(p.TargetPort)
			reaches[target] = true
			switch {
			case target == 0:
				t.Errorf("%s: port %s targets %q, which is no container port", o, p.Name, p.TargetPort.Value)
			case target != p.Port:
				t.Errorf("%s: port %s is %d but targets container port %d: keep them equal", o, p.Name, p.Port, target)
			}
			exposed[target] = true
		}
		// Readiness says whether a replica takes checkout traffic, not
		// whether operators can reach it.
		publish := spec.PublishNotReadyAddresses != nil && *spec.PublishNotReadyAddresses
		switch {
		case reaches[s.ports["checkout"]] && publish:
			t.Errorf("%s: publishNotReadyAddresses sends checkout traffic to replicas that are not ready (draining, no valid flags, schema behind)", o)
		case reaches[s.ports["admin"]] && !publish:
			t.Errorf("%s: publishNotReadyAddresses is not true: a replica that turns unready leaves this Service, and an unready fleet takes the operators' route to the kill switch with it, in the incident that needs it", o)
		}
	}
	for name, port := range s.ports {
		if !exposed[port] {
			t.Errorf("no Service exposes container port %s (%d)", name, port)
		}
	}
	if n := len(svcs); n < 2 {
		t.Errorf("%d Service(s): the checkout API and the admin listener should be exposed apart", n)
	}
}

// adminAccess is the namespace label the NetworkPolicy lets reach the
// admin port (docs/deploy.md, "The admin plane during an incident").
const adminAccess = "reservoir/admin-access"

// The NetworkPolicy selects exactly the server pods, governs their
// ingress only, leaves the checkout port open to every checkout client,
// and lets only namespaces labelled reservoir/admin-access=true reach the
// admin port (the admin API and its kill switch, the dashboard, /metrics).
func TestNetworkPolicy(t *testing.T) { checkNetworkPolicy(t, thisRepo) }

func checkNetworkPolicy(t tb, r *repo) {
	s := loadServed(t, r)
	var spec networkPolicySpec
	o := s.m.one(t, "NetworkPolicy", &strictly{&spec})
	if !maps.Equal(spec.PodSelector.MatchLabels, s.spec.Selector.MatchLabels) {
		t.Errorf("%s: podSelector %v, want exactly the server pods' labels %v (the Deployment's selector)", o, spec.PodSelector.MatchLabels, s.spec.Selector.MatchLabels)
	}
	if !slices.Equal(spec.PolicyTypes, []string{"Ingress"}) || len(spec.Egress) > 0 {
		t.Errorf("%s: policyTypes %v with %d egress rule(s), want [Ingress] alone: the replicas' connections to MySQL and Redis are not this policy's to cut", o, spec.PolicyTypes, len(spec.Egress))
	}
	// covers reports whether a rule's ports reach the container port
	// named name: no ports (every port), an entry without a port (every
	// port of its protocol), the name, its number, or a range holding it.
	covers := func(ports []policyPort, name string) bool {
		if len(ports) == 0 {
			return true
		}
		for _, p := range ports {
			n, err := strconv.Atoi(p.Port.Value)
			switch {
			case p.Port.Value == "" || p.Port.Value == name:
				return true
			case err == nil && (n == s.ports[name] || (p.EndPort != nil && n <= s.ports[name] && s.ports[name] <= *p.EndPort)):
				return true
			}
		}
		return false
	}
	openCheckout, adminReached := false, false
	for i, rule := range spec.Ingress {
		for _, p := range rule.Ports {
			if _, err := strconv.Atoi(p.Port.Value); err != nil && p.Port.Value != "" && s.ports[p.Port.Value] == 0 {
				t.Errorf("%s: ingress rule %d names port %q, which the container does not have: the rule matches nothing", o, i, p.Port.Value)
			}
		}
		if covers(rule.Ports, "checkout") && len(rule.From) == 0 {
			openCheckout = true
		}
		if !covers(rule.Ports, "admin") {
			continue
		}
		if len(rule.From) == 0 {
			t.Errorf("%s: ingress rule %d opens the admin port to every source: the admin API and its kill switch would be one token away from anything that reaches the pods", o, i)
			continue
		}
		for _, peer := range rule.From {
			ns := peer.NamespaceSelector
			if ns != nil && peer.PodSelector == nil && peer.IPBlock == nil && maps.Equal(ns.MatchLabels, map[string]string{adminAccess: "true"}) {
				adminReached = true
				continue
			}
			t.Errorf("%s: ingress rule %d lets %s reach the admin port; only namespaces labelled %s=true may", o, i, peer, adminAccess)
		}
	}
	if !openCheckout {
		t.Errorf("%s: no ingress rule opens the checkout port (%d) to every source: checkout clients outside the labelled namespaces would be refused", o, s.ports["checkout"])
	}
	if !adminReached {
		t.Errorf("%s: no ingress rule lets namespaces labelled %s=true reach the admin port (%d): operators and Prometheus would be refused", o, adminAccess, s.ports["admin"])
	}
}

// The PodDisruptionBudget covers the Deployment's pods and lets a node
// drain proceed.
func TestPodDisruptionBudget(t *testing.T) { checkPodDisruptionBudget(t, thisRepo) }

func checkPodDisruptionBudget(t tb, r *repo) {
	s := loadServed(t, r)
	var spec pdbSpec
	o := s.m.one(t, "PodDisruptionBudget", &spec)
	if !subset(spec.Selector.MatchLabels, s.spec.Template.Metadata.Labels) {
		t.Errorf("%s: selector %v does not select the Deployment's pods %v", o, spec.Selector.MatchLabels, s.spec.Template.Metadata.Labels)
	}
	switch {
	case spec.MaxUnavailable == nil && spec.MinAvailable == nil:
		t.Errorf("%s: neither maxUnavailable nor minAvailable", o)
	case spec.MaxUnavailable != nil && *spec.MaxUnavailable < 1:
		t.Errorf("%s: maxUnavailable %d blocks every node drain", o, *spec.MaxUnavailable)
	case spec.MinAvailable != nil && *spec.MinAvailable >= s.spec.Replicas:
		t.Errorf("%s: minAvailable %d with %d replicas blocks every node drain", o, *spec.MinAvailable, s.spec.Replicas)
	}
}

// envRef matches a ${NAME} reference of the topology.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// The topology in the ConfigMap is valid, takes every secret from the
// environment the Deployment fills from a Secret, and keeps the flags in
// the control database (flags_source = "database"), where the kill switch
// of any replica, of the dashboard or of `reservoir rollout kill` reaches
// every replica within tens of milliseconds; a flags file would be a
// read-only ConfigMap, about a minute behind. The migrate Job migrates the
// control database and every pod's, with the same Secret keys the
// topology reads, and then writes the first flags (`rollout ... init`:
// every shop in redis mode, the kill switch off), after the control
// database's migration (which creates their table), with the Deployment's
// topology and env.
func TestTopologyFlagsAndMigrate(t *testing.T) { checkTopologyFlagsAndMigrate(t, thisRepo) }

func checkTopologyFlagsAndMigrate(t tb, r *repo) {
	s := loadServed(t, r)
	args := slices.Concat(s.c.Command, s.c.Args)
	topoPath, _ := flagValue(args, "topology")
	text, ok := mounted(s.m, s.spec.Template.Spec, s.c, topoPath, "ConfigMap")
	if !ok || text == "" {
		t.Fatalf("the topology %s is in no ConfigMap", topoPath)
	}
	env := secretEnv(s.c)
	var code []string // the topology without its comments
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			code = append(code, l)
		}
	}
	var refs []string // the ${NAME}s the topology needs
	for _, m := range envRef.FindAllStringSubmatch(strings.Join(code, "\n"), -1) {
		refs = append(refs, m[1])
		ref, ok := env[m[1]]
		if !ok {
			t.Errorf("the topology refers to ${%s}, which the Deployment does not fill from a Secret", m[1])
			continue
		}
		t.Setenv(m[1], s.m.keys("Secret", ref.Name)[ref.Key])
	}
	// The secret fields as written (Parse resolves them): each a reference,
	// never a secret inline.
	var raw struct {
		ControlDSN string `toml:"control_dsn"`
		Pods       []struct {
			Name          string `toml:"name"`
			MySQLDSN      string `toml:"mysql_dsn"`
			RedisPassword string `toml:"redis_password"`
		} `toml:"pods"`
	}
	if _, err := toml.Decode(text, &raw); err != nil {
		t.Fatalf("the topology in the ConfigMap: %v", err)
	}
	secretFields := map[string]string{"control_dsn": raw.ControlDSN}
	for _, p := range raw.Pods {
		secretFields["pod "+p.Name+" mysql_dsn"] = p.MySQLDSN
		if p.RedisPassword != "" {
			secretFields["pod "+p.Name+" redis_password"] = p.RedisPassword
		}
	}
	for f, v := range secretFields {
		if m := envRef.FindString(v); m != v {
			t.Errorf("the topology's %s is %q, not one ${ENV} reference: keep the secret in a Secret", f, v)
		}
	}
	topo, err := topology.Parse([]byte(text))
	if err != nil {
		t.Fatalf("the topology in the ConfigMap: %v", err)
	}

	// The flags: in the control database. A flags file here would be a
	// ConfigMap: read-only (the admin API's kill switch fails) and a minute
	// from the replicas.
	if topo.FlagsSource != topology.FlagsFromDatabase {
		t.Errorf("the topology's flags_source is %q, want %q: every replica polls the control database's flags, and a kill switch from any replica, the dashboard or `reservoir rollout kill` reaches them all (a flags_file would be a read-only ConfigMap, a minute behind)",
			topo.FlagsSource, topology.FlagsFromDatabase)
	}
	// What `rollout init` writes there first: every shop in redis mode
	// (docs/deploy.md: Redis decides until the rollout moves a pod).
	first := flagdoc.NewFlags()
	for _, p := range topo.Pods {
		for _, shop := range append([]int64{999999}, p.Shops...) {
			if d := first.Resolve(p.Name, shop); d.Mode != authority.ModeRedis || d.Kill != authority.KillOff {
				t.Errorf("the first flags (rollout init) give pod %s shop %d %+v, want mode redis and the kill switch off", p.Name, shop, d)
			}
		}
	}

	// The migrate Job: one container per database, each `migrate up` with
	// the DSN the topology reads for that database; then `rollout init`.
	var job jobSpec
	jo := s.m.one(t, "Job", &job)
	dsnKey := func(field string) (keyRef, bool) {
		m := envRef.FindStringSubmatch(field)
		if m == nil || m[0] != field {
			return keyRef{}, false
		}
		ref, ok := env[m[1]]
		return ref, ok
	}
	wantKeys := map[keyRef]string{}
	controlKey, ok := dsnKey(raw.ControlDSN)
	if ok {
		wantKeys[controlKey] = "the control database"
	}
	for _, p := range raw.Pods {
		if ref, ok := dsnKey(p.MySQLDSN); ok {
			wantKeys[ref] = "pod " + p.Name
		}
	}
	if len(wantKeys) != len(raw.Pods)+1 {
		t.Fatalf("the DSNs of the control database and of %d pods name %d distinct Secret keys", len(raw.Pods), len(wantKeys))
	}
	known := cliFlags(t, r)
	spec := job.Template.Spec
	if len(spec.Containers) == 0 {
		t.Errorf("%s: no containers (a pod needs one; init containers alone do not do)", jo)
	}
	// Init containers run one by one, each to completion, before the
	// containers, which run in parallel: the control database's migration
	// must be an init container, and `rollout init` must come after it.
	controlAt := -1  // the control database's migration, in spec.InitContainers
	var initAt []int // `rollout init`, in the concatenation
	for i, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		who := jo.String() + " container " + c.Name
		cargs := slices.Concat(c.Command, c.Args)
		checkFlagsExist(t, who, cargs, known)
		if c.Image != s.c.Image {
			t.Errorf("%s: image %s, the Deployment runs %s: migrate and init with the binary you deploy", who, c.Image, s.c.Image)
		}
		checkSecurity(t, who, spec.SecurityContext, c)
		switch {
		case len(cargs) >= 2 && cargs[0] == "migrate" && cargs[len(cargs)-1] == "up":
			if _, ok := flagValue(cargs, "dsn"); ok {
				t.Errorf("%s: --dsn on the command line shows the password in the pod spec; use $RESERVOIR_DSN from the Secret", who)
			}
			ref, ok := secretEnv(c)["RESERVOIR_DSN"]
			if !ok {
				t.Errorf("%s: $RESERVOIR_DSN does not come from a Secret", who)
				continue
			}
			if ref == controlKey && i < len(spec.InitContainers) && controlAt < 0 {
				controlAt = i
			}
			// Each database gets the migration set of its role: a pod's
			// database would otherwise get the control tables, or the
			// control database lack them.
			wantSet := "pod"
			if ref == controlKey {
				wantSet = "control"
			}
			if set, _ := flagValue(cargs, "set"); set != wantSet {
				t.Errorf("%s: migrates %s (Secret %s key %s) with --set %q, want --set %s: each database gets the migration set of its role",
					who, wantKeys[ref], ref.Name, ref.Key, set, wantSet)
			}
			delete(wantKeys, ref)
		case len(cargs) >= 2 && cargs[0] == "rollout" && cargs[len(cargs)-1] == "init":
			initAt = append(initAt, i)
			checkReadsTopology(t, s.m, who, spec, c, text, refs, env)
		default:
			t.Errorf("%s: args %v, want migrate ... up or rollout ... init", who, cargs)
		}
	}
	for ref, db := range wantKeys {
		t.Errorf("%s migrates no database with %s's DSN (Secret %s key %s)", jo, db, ref.Name, ref.Key)
	}
	if len(initAt) == 0 {
		t.Errorf("%s runs no `rollout ... init`: a new control database holds no flags, and replicas without flags are never ready", jo)
	}
	for _, i := range initAt {
		if controlAt < 0 || i <= controlAt {
			t.Errorf("%s: `rollout init` does not run after the control database's migration (it must be an init container, and init a later one or a container): init would find no rollout_flags table", jo)
		}
	}
	checkRefs(t, s.m, jo.String(), spec)
}

// checkReadsTopology checks a container that reads the topology beside
// serve (the Job's `rollout ... init`, `rollout auto`, `reconcile`): it
// reads the Deployment's topology (text) from a mounted ConfigMap, with
// every ${NAME} it refers to (refs) filled from the Secret key the
// Deployment fills it from (env): the topology is read whole, so an
// unfilled reference stops it, and another key would be another database.
func checkReadsTopology(t tb, m *manifests, who string, spec podSpec, c container, text string, refs []string, env map[string]keyRef) {
	t.Helper()
	cargs := slices.Concat(c.Command, c.Args)
	p, ok := flagValue(cargs, "topology")
	switch {
	case !ok:
		t.Errorf("%s: %s has no --topology", who, cargs[0])
	default:
		got, ok := mounted(m, spec, c, p, "ConfigMap")
		switch {
		case !ok:
			t.Errorf("%s: --topology %s is not a key of a ConfigMap mounted at its directory", who, p)
		case got != text:
			t.Errorf("%s: --topology %s is not the topology the Deployment reads", who, p)
		}
	}
	cenv := secretEnv(c)
	for _, name := range refs {
		ref, ok := cenv[name]
		switch {
		case !ok:
			t.Errorf("%s does not fill ${%s} from a Secret: the topology would not load", who, name)
		case ref != env[name]:
			t.Errorf("%s fills ${%s} from Secret %s key %s, the Deployment from Secret %s key %s", who, name, ref.Name, ref.Key, env[name].Name, env[name].Key)
		}
	}
}

// The Secret examples are placeholders a reader cannot mistake for
// credentials, and the clients and operators files are ones serve
// accepts, as is deploy/operators.example.toml.
func TestSecretExamples(t *testing.T) { checkSecretExamples(t, thisRepo) }

func checkSecretExamples(t tb, r *repo) {
	if _, err := server.ParseOperators(r.read(t, filepath.Join(r.root, "deploy", "operators.example.toml"))); err != nil {
		t.Errorf("deploy/operators.example.toml: %v", err)
	}
	m := loadManifests(t, r)
	for _, o := range m.all("Secret") {
		if !strings.Contains(o.file, "example") {
			t.Errorf("%s: a Secret in a file not named as an example", o)
		}
		for k, v := range m.keys("Secret", o.Metadata.Name) {
			if k == "clients.toml" {
				if _, err := server.ParseClients([]byte(v)); err != nil {
					t.Errorf("%s: %s: %v", o, k, err)
				}
				continue
			}
			if k == "operators.toml" {
				if _, err := server.ParseOperators([]byte(v)); err != nil {
					t.Errorf("%s: %s: %v", o, k, err)
				}
				continue
			}
			if !strings.Contains(v, "PLACEHOLDER") {
				t.Errorf("%s: %s does not say it is a PLACEHOLDER", o, k)
			}
		}
	}
}

// dockerfile is the repository's Dockerfile, instruction by instruction.
type dockerfile struct {
	stages []stage
	args   map[string]string // ARGs before the first FROM
}

type stage struct {
	from, name string
	platform   string            // FROM --platform=
	args       map[string]string // the stage's ARGs, with their defaults
	labels     map[string]string
	user       string
	expose     []string
	entrypoint []string
	cmd        []string
	runs       []string
	copies     []string
}

// dockerLabel is one key=value of a LABEL instruction.
var dockerLabel = regexp.MustCompile(`([A-Za-z0-9._-]+)=("(?:[^"\\]|\\.)*"|\S+)`)

func loadDockerfile(t tb, r *repo) *dockerfile {
	t.Helper()
	b := r.read(t, filepath.Join(r.root, "Dockerfile"))
	d := &dockerfile{args: map[string]string{}}
	var lines []string
	cont := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") || (l == "" && cont == "") {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cont += s + " "
			continue
		}
		lines = append(lines, cont+l)
		cont = ""
	}
	execForm := func(instr, v string) []string {
		var out []string
		if err := json.Unmarshal([]byte(v), &out); err != nil {
			t.Fatalf("Dockerfile: %s %s: not the exec form (a JSON array): a shell form needs a shell, which the runtime image has not", instr, v)
		}
		return out
	}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		var cur *stage
		if n := len(d.stages); n > 0 {
			cur = &d.stages[n-1]
		}
		switch strings.ToUpper(instr) {
		case "FROM":
			f := strings.Fields(rest)
			st := stage{args: map[string]string{}, labels: map[string]string{}}
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				if v, ok := strings.CutPrefix(f[0], "--platform="); ok {
					st.platform = v
				}
				f = f[1:]
			}
			if len(f) == 0 {
				t.Fatalf("Dockerfile: FROM %s names no image", rest)
			}
			st.from = f[0]
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			d.stages = append(d.stages, st)
		case "ARG":
			args := d.args
			if cur != nil {
				args = cur.args
			}
			for _, a := range strings.Fields(rest) {
				k, v, _ := strings.Cut(a, "=")
				args[k] = v
			}
		case "LABEL":
			for _, m := range dockerLabel.FindAllStringSubmatch(rest, -1) {
				v := m[2]
				if uq, err := strconv.Unquote(v); err == nil {
					v = uq
				}
				cur.labels[m[1]] = v
			}
		case "USER":
			cur.user = rest
		case "EXPOSE":
			cur.expose = append(cur.expose, strings.Fields(rest)...)
		case "ENTRYPOINT":
			cur.entrypoint = execForm(instr, rest)
		case "CMD":
			cur.cmd = execForm(instr, rest)
		case "RUN":
			cur.runs = append(cur.runs, rest)
		case "COPY":
			cur.copies = append(cur.copies, rest)
		}
	}
	if len(d.stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	return d
}

// The Dockerfile builds a static binary with the Go of go.mod in one
// stage and runs it as a non-root user in another, on the ports and with
// the user the manifests expect.
func TestDockerfile(t *testing.T) { checkDockerfile(t, thisRepo) }

func checkDockerfile(t tb, r *repo) {
	d := loadDockerfile(t, r)
	s := loadServed(t, r)
	if len(d.stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s): build and run apart, so the image carries no compiler", len(d.stages))
	}
	build, run := d.stages[0], d.stages[len(d.stages)-1]
	if run.from == build.from || (build.name != "" && run.from == build.name) {
		t.Errorf("Dockerfile: the final stage runs FROM %s, the builder", run.from)
	}

	// The builder's Go is go.mod's.
	gomod := r.read(t, filepath.Join(r.root, "go.mod"))
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	from := os.Expand(build.from, func(k string) string { return d.args[k] })
	if !strings.HasPrefix(strings.TrimPrefix(from, "docker.io/library/"), "golang:"+string(m[1])) {
		t.Errorf("Dockerfile: the builder is %s, go.mod says go %s", from, m[1])
	}
	copied := false
	for _, c := range run.copies {
		f := strings.Fields(c)
		copied = copied || (len(f) == 3 && strings.HasPrefix(f[0], "--from=") && len(run.entrypoint) > 0 && f[2] == run.entrypoint[0])
	}
	if !copied {
		t.Errorf("Dockerfile: the final stage does not COPY --from the builder the binary its ENTRYPOINT runs (%v)", run.entrypoint)
	}
	built := strings.Join(build.runs, "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/reservoir"} {
		if !strings.Contains(built, want) {
			t.Errorf("Dockerfile: the build does not use %s", want)
		}
	}
	if !slices.Contains(buildTags(built), servingTag) {
		t.Errorf("Dockerfile: the build does not use -tags %s: the image would link the benchmark and its fault injection (toxiproxy, gorilla/mux, zerolog)", servingTag)
	}
	checkPinned(t, d)
	checkPlatforms(t, build)
	checkLabels(t, run)

	// The runtime stage: numeric non-root user, equal to the manifests'.
	uid, _, _ := strings.Cut(run.user, ":")
	n, err := strconv.Atoi(uid)
	switch {
	case run.user == "":
		t.Error("Dockerfile: the final stage sets no USER: it would run as root")
	case err != nil:
		t.Errorf("Dockerfile: USER %s is not numeric: runAsNonRoot cannot verify a name", run.user)
	case n == 0:
		t.Error("Dockerfile: USER is root")
	default:
		if u := s.spec.Template.Spec.SecurityContext.RunAsUser; u != nil && *u != n {
			t.Errorf("Dockerfile: USER %d, the Deployment's runAsUser %d", n, *u)
		}
		if u := s.c.SecurityContext.RunAsUser; u != nil && *u != n {
			t.Errorf("Dockerfile: USER %d, the container's runAsUser %d", n, *u)
		}
	}
	if !slices.Equal(run.entrypoint, []string{"/reservoir"}) {
		t.Errorf("Dockerfile: ENTRYPOINT %v, want [/reservoir]", run.entrypoint)
	}
	if s.c.Command != nil {
		t.Errorf("%s: the container overrides the image's entrypoint with %v", s.dep, s.c.Command)
	}

	// EXPOSE: the manifests' container ports, and CMD listens on them.
	var exposed, ports []int
	for _, e := range run.expose {
		p, err := strconv.Atoi(strings.TrimSuffix(e, "/tcp"))
		if err != nil {
			t.Errorf("Dockerfile: EXPOSE %s", e)
		}
		exposed = append(exposed, p)
	}
	for _, p := range s.ports {
		ports = append(ports, p)
	}
	slices.Sort(exposed)
	slices.Sort(ports)
	if !slices.Equal(exposed, ports) {
		t.Errorf("Dockerfile EXPOSEs %v, the Deployment's container ports are %v", exposed, ports)
	}
	if len(run.cmd) == 0 || run.cmd[0] != "serve" {
		t.Fatalf("Dockerfile: CMD %v does not start with serve", run.cmd)
	}
	checkFlagsExist(t, "Dockerfile CMD", run.cmd, cliFlags(t, r))
	for flag, name := range map[string]string{"addr": "checkout", "admin-addr": "admin"} {
		v, ok := flagValue(run.cmd, flag)
		if !ok {
			t.Errorf("Dockerfile: CMD has no --%s: the default listens on 127.0.0.1, unreachable from outside the container", flag)
			continue
		}
		if p := portOf(t, "CMD --"+flag, v); p != s.ports[name] {
			t.Errorf("Dockerfile: CMD --%s listens on %d, the %s port is %d", flag, p, name, s.ports[name])
		}
	}
}

// .dockerignore keeps out of the build context nothing the build reads:
// go.mod, go.sum, the command, and every file a //go:embed names.
func TestDockerignore(t *testing.T) { checkDockerignore(t, thisRepo) }

func checkDockerignore(t tb, r *repo) {
	b := r.read(t, filepath.Join(r.root, ".dockerignore"))
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimPrefix(path.Clean(l), "/"))
		}
	}
	needed := []string{"go.mod", "go.sum", "cmd/reservoir/main.go"}
	embed := regexp.MustCompile(`(?m)^//go:embed (.+)$`)
	err := filepath.WalkDir(r.root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "testdata") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src := r.read(t, p)
		rel, _ := filepath.Rel(r.root, filepath.Dir(p))
		for _, m := range embed.FindAllStringSubmatch(string(src), -1) {
			for _, pat := range strings.Fields(m[1]) {
				files, err := filepath.Glob(filepath.Join(filepath.Dir(p), pat))
				if err != nil || len(files) == 0 {
					t.Errorf("%s: //go:embed %s matches nothing", p, pat)
				}
				for _, f := range files {
					rel, _ := filepath.Rel(r.root, f)
					needed = append(needed, filepath.ToSlash(rel))
				}
			}
		}
		needed = append(needed, filepath.ToSlash(filepath.Join(rel, e.Name())))
		return nil
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(needed) < 10 {
		t.Fatalf("found only %v to keep: the walk is broken", needed)
	}
	for _, f := range needed {
		if strings.HasPrefix(f, "deploy/") {
			continue // this package: it has no code the binary needs
		}
		for _, pat := range patterns {
			if ignored(pat, f) {
				t.Errorf(".dockerignore's %q excludes %s, which the build reads", pat, f)
			}
		}
	}
	for _, f := range []string{".git/HEAD", "bin/reservoir", "docs/api.md"} {
		if !slices.ContainsFunc(patterns, func(p string) bool { return ignored(p, f) }) {
			t.Errorf(".dockerignore does not exclude %s", f)
		}
	}
}

// ignored reports whether a .dockerignore pattern excludes file: the
// pattern matches the file or one of its parent directories, "**"
// matching any number of directories.
func ignored(pattern, file string) bool {
	parts := strings.Split(file, "/")
	for i := 1; i <= len(parts); i++ {
		if match(strings.Split(pattern, "/"), parts[:i]) {
			return true
		}
	}
	return false
}

func match(pat, parts []string) bool {
	switch {
	case len(pat) == 0:
		return len(parts) == 0
	case pat[0] == "**":
		for i := 0; i <= len(parts); i++ {
			if match(pat[1:], parts[i:]) {
				return true
			}
		}
		return false
	case len(parts) == 0:
		return false
	}
	ok, _ := path.Match(pat[0], parts[0])
	return ok && match(pat[1:], parts[1:])
}

// recorder is a tb that keeps what a check reports. Fatal ends the check's
// goroutine, as it ends a test's.
type recorder struct {
	t      *testing.T
	errors []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatal(args ...any)              { r.Error(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, a ...any) { r.Errorf(format, a...); runtime.Goexit() }
func (r *recorder) Logf(string, ...any)            {}
func (r *recorder) Setenv(key, value string)       { r.t.Setenv(key, value) }

// TestChecksCatchBreakage plants one breakage at a time in a copy of a
// file and shows the check that guards against it failing, with the
// words that say why: a check that passes on everything proves nothing.
func TestChecksCatchBreakage(t *testing.T) {
	const (
		dep     = kubeDir + "/base/deployment.yaml"
		svc     = kubeDir + "/base/service.yaml"
		pdb     = kubeDir + "/base/pdb.yaml"
		cm      = kubeDir + "/base/configmap.yaml"
		job     = kubeDir + "/base/migrate-job.yaml"
		secrets = kubeDir + "/" + secretsExample
		np      = kubeDir + "/base/networkpolicy.yaml"
		overlay = kubeDir + "/" + exampleOverlay + "/kustomization.yaml"
		auto    = kubeDir + "/components/rollout-auto/deployment.yaml"
		plan    = kubeDir + "/components/rollout-auto/plan.toml"
		cron    = kubeDir + "/components/reconcile/cronjob.yaml"
	)
	// The Job's init containers (the control database's migration) and
	// containers (each pod's, then `rollout init`), to plant a move of
	// one among the other: cut from the file.
	jobYAML, err := os.ReadFile(filepath.Join(thisRepo.root, job))
	if err != nil {
		t.Fatal(err)
	}
	_, afterInits, _ := strings.Cut(string(jobYAML), "      initContainers:\n")
	jobInits, afterContainers, ok1 := strings.Cut(afterInits, "      containers:\n")
	jobContainers, _, ok2 := strings.Cut(afterContainers, "      volumes:\n")
	jobPods, jobFlagsInit, ok3 := strings.Cut(jobContainers, "        - name: flags-init\n")
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("%s no longer has initContainers, then containers ending with flags-init, then volumes: update the cases that move them", job)
	}
	jobFlagsInit = "        - name: flags-init\n" + jobFlagsInit
	cases := []struct {
		name, file, old, new string
		check                func(tb, *repo)
		want                 string
	}{
		{"readiness on the checkout port", dep, "path: /readyz\n              port: admin", "path: /readyz\n              port: checkout",
			checkDeployment, "readinessProbe hits port"},
		{"liveness on /readyz", dep, "path: /healthz\n              port: admin\n            periodSeconds: 10", "path: /readyz\n              port: admin\n            periodSeconds: 10",
			checkDeployment, "livenessProbe hits /readyz"},
		{"root allowed", dep, "            runAsNonRoot: true\n            runAsUser: 65532\n            allowPrivilegeEscalation", "            runAsNonRoot: false\n            runAsUser: 65532\n            allowPrivilegeEscalation",
			checkDeployment, "runAsNonRoot is not true"},
		{"writable root", dep, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", checkDeployment, "readOnlyRootFilesystem"},
		{"no memory limit", dep, "              memory: 512Mi\n", "", checkDeployment, "must both set memory"},
		{"grace too short", dep, "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 25", checkDeployment, "terminationGracePeriodSeconds 25"},
		{"a flag serve lacks", dep, "- --drain-timeout=10s", "- --drain-timeout=10s\n            - --drain=10s", checkDeployment, "passes --drain"},
		{"admin port moved", dep, "--admin-addr=:8081", "--admin-addr=:9090", checkDeployment, "--admin-addr :9090 listens on 9090"},
		{"a Secret missing", secrets, "name: reservoir-admin\n", "name: reservoir-admin-typo\n", checkDeployment, "does not define"},
		{"topology by subPath", dep, "mountPath: /etc/reservoir/topology\n", "mountPath: /etc/reservoir/topology\n              subPath: topology.toml\n",
			checkDeployment, "subPath"},
		{"service port apart", svc, "port: 8081", "port: 9091", checkServices, "keep them equal"},
		{"service selects nothing", svc, "app.kubernetes.io/component: server\n  ports:\n    - name: admin", "app.kubernetes.io/component: worker\n  ports:\n    - name: admin",
			checkServices, "does not select"},
		{"admin Service drops unready replicas", svc, "  publishNotReadyAddresses: true\n", "", checkServices, "publishNotReadyAddresses is not true"},
		{"checkout Service keeps unready replicas", svc, "  # Checkout traffic follows readiness: no publishNotReadyAddresses here.\n",
			"  # Checkout traffic follows readiness: no publishNotReadyAddresses here.\n  publishNotReadyAddresses: true\n",
			checkServices, "sends checkout traffic to replicas that are not ready"},
		{"admin port open to all", np, "      from:\n        - namespaceSelector:\n            matchLabels:\n              reservoir/admin-access: \"true\"\n", "",
			checkNetworkPolicy, "opens the admin port to every source"},
		{"checkout rule on every port", np, "    - ports:\n        - port: checkout\n          protocol: TCP\n", "    - {}\n",
			checkNetworkPolicy, "ingress rule 0 opens the admin port to every source"},
		{"admin-access label changed", np, `reservoir/admin-access: "true"`, `reservoir/admin: "true"`,
			checkNetworkPolicy, "lets namespaceSelector map[reservoir/admin:true] reach the admin port; only namespaces labelled reservoir/admin-access=true may"},
		{"admin open to the namespace's pods", np, "        - namespaceSelector:\n", "        - podSelector: {}\n          namespaceSelector:\n",
			checkNetworkPolicy, "lets namespaceSelector map[reservoir/admin-access:true] and podSelector map[] reach the admin port"},
		{"checkout restricted", np, "        - port: checkout\n          protocol: TCP\n", "        - port: checkout\n          protocol: TCP\n      from:\n        - podSelector: {}\n",
			checkNetworkPolicy, "no ingress rule opens the checkout port"},
		{"policy selects other pods", np, "      app.kubernetes.io/component: server\n  policyTypes:", "      app.kubernetes.io/component: worker\n  policyTypes:",
			checkNetworkPolicy, "want exactly the server pods' labels"},
		{"egress denied", np, "    - Ingress\n", "    - Ingress\n    - Egress\n", checkNetworkPolicy, "want [Ingress] alone"},
		{"a misspelt field in the policy", np, "      from:\n", "      form:\n", checkNetworkPolicy, "field form not found"},
		{"PDB selects other pods", pdb, "app.kubernetes.io/component: server", "app.kubernetes.io/component: worker", checkPodDisruptionBudget, "does not select"},
		{"PDB blocks drains", pdb, "maxUnavailable: 1", "maxUnavailable: 0", checkPodDisruptionBudget, "blocks every node drain"},
		{"a DSN inline", cm, `mysql_dsn = "${RESERVOIR_POD_A_DSN}"`, `mysql_dsn = "reservoir:hunter2@tcp(mysql-a:3306)/reservoir"`,
			checkTopologyFlagsAndMigrate, "not one ${ENV} reference"},
		{"a reference unfilled", cm, "${RESERVOIR_POD_B_REDIS_PASSWORD}", "${RESERVOIR_REDIS_B}", checkTopologyFlagsAndMigrate, "does not fill"},
		{"flags from a file", cm, "\n    flags_source = \"database\"\n", "\n    flags_file = \"/etc/reservoir/flags/reservoir.flagd.json\"\n", checkTopologyFlagsAndMigrate, "flags_source"},
		{"a pod not migrated", job, "key: pod-b-dsn", "key: pod-a-dsn", checkTopologyFlagsAndMigrate, "migrates no database with pod pod-b's DSN"},
		{"a DSN on the command line", job, `args: ["migrate", "--set", "pod", "up"]`, `args: ["migrate", "--set", "pod", "--dsn", "x", "up"]`, checkTopologyFlagsAndMigrate, "--dsn on the command line"},
		{"a pod migrated with the control set", job, `args: ["migrate", "--set", "pod", "up"]`, `args: ["migrate", "--set", "control", "up"]`,
			checkTopologyFlagsAndMigrate, `with --set "control", want --set pod`},
		{"the control database without its set", job, `args: ["migrate", "--set", "control", "up"]`, `args: ["migrate", "up"]`,
			checkTopologyFlagsAndMigrate, `with --set "", want --set control`},
		{"no rollout init", job, `"init"]`, `"status"]`, checkTopologyFlagsAndMigrate, "runs no `rollout ... init`"},
		{"init before the control database's migration", job, "      initContainers:\n" + jobInits + "      containers:\n" + jobContainers,
			"      initContainers:\n" + jobFlagsInit + jobInits + "      containers:\n" + jobPods,
			checkTopologyFlagsAndMigrate, "does not run after the control database's migration"},
		{"control migrated in parallel with init", job, "      initContainers:\n" + jobInits + "      containers:\n", "      containers:\n" + jobInits,
			checkTopologyFlagsAndMigrate, "does not run after the control database's migration"},
		{"init without the topology", job, "          volumeMounts:\n            - name: topology\n", "          volumeMounts:\n            - name: topology-typo\n",
			checkTopologyFlagsAndMigrate, "is not a key of a ConfigMap mounted"},
		{"init env unfilled", job, "- name: RESERVOIR_POD_B_REDIS_PASSWORD", "- name: RESERVOIR_POD_B_REDIS_PASS", checkTopologyFlagsAndMigrate, "does not fill ${RESERVOIR_POD_B_REDIS_PASSWORD}"},
		{"init env from another key", job, "key: pod-b-password", "key: pod-a-password", checkTopologyFlagsAndMigrate, "the Deployment from Secret reservoir-redis key pod-b-password"},
		{"a real-looking secret", secrets, `pod-a-password: "PLACEHOLDER-NOT-A-PASSWORD"`, `pod-a-password: "hunter2"`, checkSecretExamples, "PLACEHOLDER"},
		{"a bad clients file", secrets, `roles = ["inventory"]`, `roles = ["admin"]`, checkSecretExamples, "unknown role"},
		{"one stage", "Dockerfile", "FROM gcr.io/distroless/static-debian12:nonroot@${DISTROLESS_DIGEST}\n", "", checkDockerfile, "1 stage(s)"},
		{"binary not copied", "Dockerfile", "COPY --from=build /out/reservoir /reservoir", "", checkDockerfile, "does not COPY"},
		{"root user", "Dockerfile", "USER 65532:65532", "USER 0", checkDockerfile, "USER is root"},
		{"user by name", "Dockerfile", "USER 65532:65532", "USER nonroot", checkDockerfile, "not numeric"},
		{"a port not exposed", "Dockerfile", "EXPOSE 8080 8081", "EXPOSE 8080", checkDockerfile, "EXPOSEs [8080]"},
		{"shell entrypoint", "Dockerfile", `ENTRYPOINT ["/reservoir"]`, `ENTRYPOINT ["/bin/sh", "-c", "/reservoir"]`, checkDockerfile, "ENTRYPOINT"},
		{"another Go", "Dockerfile", "ARG GO_VERSION=1.26", "ARG GO_VERSION=1.22", checkDockerfile, "go.mod says go"},
		{"cgo on", "Dockerfile", "CGO_ENABLED=0 ", "", checkDockerfile, "CGO_ENABLED=0"},
		{"bench in the image", "Dockerfile", "-mod=readonly -tags nobench -trimpath", "-mod=readonly -trimpath", checkDockerfile, "does not use -tags nobench"},
		{"base image by tag", "Dockerfile", "-bookworm@${GOLANG_DIGEST} AS build", "-bookworm AS build", checkDockerfile, "pinned by tag only"},
		{"runtime image by a made-up digest", "Dockerfile", "nonroot@${DISTROLESS_DIGEST}", "nonroot@sha256:latest", checkDockerfile, `"sha256:latest" is not a sha256 digest`},
		{"a digest ARG defaulting to a tag", "Dockerfile", "ARG GOLANG_DIGEST\n", "ARG GOLANG_DIGEST=latest\n", checkDockerfile, `ARG GOLANG_DIGEST's default "latest" is not a sha256 digest`},
		{"compiler emulated", "Dockerfile", "FROM --platform=$BUILDPLATFORM ", "FROM ", checkDockerfile, "want $BUILDPLATFORM"},
		{"one architecture", "Dockerfile", "GOARCH=$TARGETARCH ", "", checkDockerfile, "does not set GOARCH=$TARGETARCH"},
		{"no revision label", "Dockerfile", "org.opencontainers.image.revision=\"${REVISION}\"", "org.opencontainers.image.revision=\"main\"", checkDockerfile, "want ${REVISION}"},
		{"no source label", "Dockerfile", "      org.opencontainers.image.source=", "      org.opencontainers.image.url=", checkDockerfile, "no LABEL org.opencontainers.image.source"},
		{"a misspelt field", dep, "terminationGracePeriodSeconds: 45", "terminationGracePeriod: 45", checkStrict, `unknown field "spec.template.spec.terminationGracePeriod"`},
		{"a field in the wrong case", cron, "concurrencyPolicy: Forbid", "ConcurrencyPolicy: Forbid", checkStrict, `unknown field "spec.ConcurrencyPolicy"`},
		{"a kind the checks do not know", np, "kind: NetworkPolicy", "kind: NetworkPolicyy", checkStrict, "no kind the checks know"},
		{"a component missing", overlay, "  - ../../components/reconcile\n", "  - ../../components/reconcil\n", checkStrict, "kustomize build"},
		{"the image left to the base", overlay, "    newName: registry.example.com/reservoir\n    newTag: v1.2.3\n", "", checkImages, "the base's placeholder"},
		{"one image missed", cron, "image: reservoir #", "image: registry.example.com/reservoir:v1.0.0 #", checkImages, "one release everywhere"},
		{"GOMEMLIMIT at the limit", dep, "value: 448MiB", "value: 512MiB", checkMemoryLimits, "is 100% of the memory limit"},
		{"GOMEMLIMIT from the limit", dep, "              value: 448MiB\n", "              valueFrom:\n                resourceFieldRef:\n                  resource: limits.memory\n", checkMemoryLimits, "not a literal value"},
		{"no GOMEMLIMIT", auto, "            - name: GOMEMLIMIT\n              value: 224MiB\n", "", checkMemoryLimits, "no GOMEMLIMIT"},
		{"a Job without a deadline", job, "  activeDeadlineSeconds: 1800\n", "", checkJobDeadlines, "Job reservoir-migrate: no activeDeadlineSeconds"},
		{"a CronJob's Job without a deadline", cron, "      activeDeadlineSeconds: 3000\n", "", checkJobDeadlines, "its jobTemplate has no activeDeadlineSeconds"},
		{"reconciles overlap", cron, "concurrencyPolicy: Forbid", "concurrencyPolicy: Allow", checkJobDeadlines, "want Forbid"},
		{"two controllers", auto, "replicas: 1", "replicas: 2", checkRolloutAuto, "two controllers"},
		{"controllers overlap in a rollout", auto, "    type: Recreate\n", "    type: RollingUpdate\n", checkRolloutAuto, "want Recreate"},
		{"controller exits after a step", auto, "            - --interval=15s\n", "            - --once\n", checkRolloutAuto, "--once"},
		{"a plan of other pods", plan, `pods = ["pod-b", "pod-a"]`, `pods = ["pod-c", "pod-b", "pod-a"]`, checkRolloutAuto, "the plan lists the pods"},
		{"an invalid plan", plan, "percent = 10", "percent = 100", checkRolloutAuto, "the plan /etc/reservoir/plan/plan.toml"},
		{"controller behind the checkout Service", auto, "      labels:\n        app.kubernetes.io/name: reservoir\n        app.kubernetes.io/component: rollout-auto\n",
			"      labels:\n        app.kubernetes.io/name: reservoir\n        app.kubernetes.io/component: server\n", checkRolloutAuto, "Service reservoir selects its pods"},
		{"controller without a topology env", auto, "- name: RESERVOIR_POD_B_DSN", "- name: RESERVOIR_POD_B_MYSQL", checkRolloutAuto, "does not fill ${RESERVOIR_POD_B_DSN}"},
		{"controller as root", auto, "            runAsNonRoot: true\n            runAsUser: 65532\n            allowPrivilegeEscalation", "            runAsNonRoot: false\n            runAsUser: 65532\n            allowPrivilegeEscalation",
			checkRolloutAuto, "runAsNonRoot is not true"},
		{"reconcile on another database", cron, "key: pod-a-dsn", "key: pod-b-dsn", checkReconcileCronJob, "the Deployment from Secret reservoir-mysql key pod-a-dsn"},
		{"reconcile restarted in place", cron, "restartPolicy: Never", "restartPolicy: OnFailure", checkReconcileCronJob, "want Never"},
		{"reconcile with a flag it lacks", cron, "- --topology=/etc/reservoir/topology/topology.toml\n", "- --topology=/etc/reservoir/topology/topology.toml\n                - --all\n", checkReconcileCronJob, "passes --all"},
		{"migrations ignored", ".dockerignore", "\ndocs/bench\n", "\ndocs/bench\nmigrations/pod/*.sql\n", checkDockerignore, "excludes migrations/pod/00001"},
		{"source ignored", ".dockerignore", "\ndocs/bench\n", "\ndocs/bench\n**/*.go\n", checkDockerignore, "excludes cmd/reservoir/main.go"},
		{"the OpenAPI document ignored", ".dockerignore", "\ndocs/bench\n", "\ndocs/bench\ndocs\n", checkDockerignore, "excludes docs/openapi.yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(thisRepo.root, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(c.old)) {
				t.Fatalf("%s no longer contains %q: update this case", c.file, c.old)
			}
			r := &repo{root: thisRepo.root, edit: map[string][]byte{c.file: bytes.Replace(b, []byte(c.old), []byte(c.new), 1)}}
			rec := &recorder{t: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.check(rec, r)
			}()
			<-done
			if len(rec.errors) == 0 {
				t.Fatalf("the check passed with %s broken (%q -> %q)", c.file, c.old, c.new)
			}
			t.Logf("with %s broken:\n%s", c.file, strings.Join(rec.errors, "\n"))
			if !slices.ContainsFunc(rec.errors, func(e string) bool { return strings.Contains(e, c.want) }) {
				t.Errorf("the check failed, but none of its errors says %q:\n%s", c.want, strings.Join(rec.errors, "\n"))
			}
		})
	}
}

// docs/deploy.md, the page these files are used from, names every
// manifest, links only to pages of the repository that exist, and its
// table of contents reaches its headings.
func TestDeployDoc(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(thisRepo.root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	// Every file of deploy/kubernetes, by its path there
	// (base/deployment.yaml, components/rollout-auto/plan.toml, ...).
	root := filepath.Join(thisRepo.root, filepath.FromSlash(kubeDir))
	n := 0
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		n++
		if rel = filepath.ToSlash(rel); !strings.Contains(doc, rel) {
			t.Errorf("docs/deploy.md does not mention %s", rel)
		}
		return nil
	})
	if err != nil || n < 10 {
		t.Fatalf("%d files in %s: %v", n, kubeDir, err)
	}
	anchors := map[string]bool{}
	slug := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(doc, -1) {
		anchors[strings.ReplaceAll(slug.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")] = true
	}
	links := regexp.MustCompile(`\]\(([^)]+)\)`).FindAllStringSubmatch(doc, -1)
	if len(links) < 5 {
		t.Fatalf("only %d links found in docs/deploy.md: the scan is broken", len(links))
	}
	for _, m := range links {
		target, anchor, _ := strings.Cut(m[1], "#")
		switch {
		case strings.Contains(target, ":"):
			t.Errorf("docs/deploy.md links outside the repository: %s", m[1])
		case target == "" && !anchors[anchor]:
			t.Errorf("docs/deploy.md links to #%s, which is no heading of it", anchor)
		case target != "":
			if _, err := os.Stat(filepath.Join(thisRepo.root, "docs", target)); err != nil {
				t.Errorf("docs/deploy.md links to %s: %v", target, err)
			}
		}
	}
}
