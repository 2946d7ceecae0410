package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/seed31b0e981/reservoir/internal/topology"
	"github.com/seed31b0e981/reservoir/rollout"
)

const (
	// kubeDir holds the manifests: base/, components/, overlays/ and the
	// Secrets' example, relative to the repository's root.
	kubeDir = "deploy/kubernetes"
	// exampleOverlay is the overlay the checks build, relative to kubeDir.
	exampleOverlay = "overlays/example"
	// secretsExample is the Secrets' names and keys, relative to kubeDir:
	// no overlay applies it (an installation creates its Secrets from its
	// secret store), but the overlay's objects refer to them.
	secretsExample = "secrets.example.yaml"
)

// renderedObject is one object of a kustomize build.
type renderedObject struct {
	apiVersion, kind, name string
	// origin is the file the object comes from, relative to kubeDir
	// ("base/deployment.yaml"), or for a generated one the kustomization
	// that generates it.
	origin string
	yaml   []byte // as kustomize build prints it
	json   []byte
}

func (o renderedObject) String() string { return o.origin + ": " + o.kind + " " + o.name }

// kustomize builds overlay (a directory under kubeDir) as `kustomize
// build` and `kubectl apply -k` do (sigs.k8s.io/kustomize/api's krusty,
// the library behind both), from r's files: kubeDir copied into memory,
// with r's edits.
func kustomize(t tb, r *repo, overlay string) []renderedObject {
	t.Helper()
	const top = "/repo/" + kubeDir
	mem := filesys.MakeFsInMemory()
	root := filepath.Join(r.root, filepath.FromSlash(kubeDir))
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join(top, filepath.ToSlash(rel)), r.read(t, p))
	})
	if err != nil {
		t.Fatalf("copying %s: %v", kubeDir, err)
	}
	// Each object's origin, for the checks' messages: asked for here and
	// taken off again below, so the objects are the overlay's own.
	kf := path.Join(top, overlay, "kustomization.yaml")
	b, err := mem.ReadFile(kf)
	if err != nil {
		t.Fatalf("%s/%s: %v", kubeDir, overlay, err)
	}
	if !bytes.Contains(b, []byte("buildMetadata:")) {
		if err := mem.WriteFile(kf, append(b, "\nbuildMetadata: [originAnnotations]\n"...)); err != nil {
			t.Fatalf("%v", err)
		}
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, path.Join(top, overlay))
	if err != nil {
		t.Fatalf("kustomize build %s/%s: %v", kubeDir, overlay, err)
	}
	var out []renderedObject
	for _, res := range rm.Resources() {
		o := renderedObject{apiVersion: res.GetApiVersion(), kind: res.GetKind(), name: res.GetName(), origin: overlay}
		if org, err := res.GetOrigin(); err == nil && org != nil {
			switch {
			case org.Path != "":
				o.origin = path.Join(overlay, org.Path)
			case org.ConfiguredIn != "":
				o.origin = path.Join(overlay, org.ConfiguredIn)
			}
		}
		if err := res.SetOrigin(nil); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		if o.yaml, err = res.AsYAML(); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		if o.json, err = res.MarshalJSON(); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		t.Fatalf("kustomize build %s/%s renders nothing", kubeDir, overlay)
	}
	return out
}

// kubeTypes are the Kubernetes API's own Go types (k8s.io/api) for each
// apiVersion and kind the manifests use. An object of a kind not listed
// fails TestOverlayDecodesStrictly: add its type here.
var kubeTypes = map[string]func() any{
	"v1 ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1 Secret":                          func() any { return &corev1.Secret{} },
	"v1 Service":                         func() any { return &corev1.Service{} },
	"apps/v1 Deployment":                 func() any { return &appsv1.Deployment{} },
	"batch/v1 Job":                       func() any { return &batchv1.Job{} },
	"batch/v1 CronJob":                   func() any { return &batchv1.CronJob{} },
	"policy/v1 PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1 NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

// decodeStrictly decodes an object's JSON into its Kubernetes API type as
// the API server does under fieldValidation=Strict (sigs.k8s.io/json:
// field names case-sensitive; an unknown or duplicated field, or a value
// of the wrong type, is an error). A misspelt field that a client-side
// apply would drop with a warning fails here.
func decodeStrictly(apiVersion, kind string, b []byte) error {
	newType, ok := kubeTypes[apiVersion+" "+kind]
	if !ok {
		return fmt.Errorf("%s %s is no kind the checks know (kubeTypes)", apiVersion, kind)
	}
	strict, err := kjson.UnmarshalStrict(b, newType(), kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// `kustomize build` of the example overlay (what `kubectl apply -k`
// sends) and the Secrets' example decode strictly into the Kubernetes
// API's types: no field a cluster would reject or ignore.
func TestOverlayDecodesStrictly(t *testing.T) { checkStrict(t, thisRepo) }

func checkStrict(t tb, r *repo) {
	objs := kustomize(t, r, exampleOverlay)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind]++
		if err := decodeStrictly(o.apiVersion, o.kind, o.json); err != nil {
			t.Errorf("%s: %v", o, err)
		}
	}
	for _, k := range []string{"Deployment", "Job", "CronJob", "Service", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget"} {
		if kinds[k] == 0 {
			t.Errorf("the example overlay renders no %s (%v)", k, kinds)
		}
	}
	file := filepath.Join(r.root, kubeDir, secretsExample)
	dec := yaml.NewDecoder(bytes.NewReader(r.read(t, file)))
	for i := 0; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", secretsExample, i, err)
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("%s: document %d: %v", secretsExample, i, err)
		}
		av, _ := doc["apiVersion"].(string)
		kind, _ := doc["kind"].(string)
		if err := decodeStrictly(av, kind, b); err != nil {
			t.Errorf("%s: document %d: %v", secretsExample, i, err)
		}
	}
}

// podTemplateOf returns the pod spec an object runs, and false for an
// object that runs none.
func podTemplateOf(t tb, o *object) (podSpec, bool) {
	t.Helper()
	var spec struct {
		Template    podTemplate `yaml:"template"`
		JobTemplate struct {
			Spec jobSpec `yaml:"spec"`
		} `yaml:"jobTemplate"`
	}
	switch o.Kind {
	case "Deployment", "Job":
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: spec: %v", o, err)
		}
		return spec.Template.Spec, true
	case "CronJob":
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: spec: %v", o, err)
		}
		return spec.JobTemplate.Spec.Template.Spec, true
	}
	return podSpec{}, false
}

// Every container the overlay renders runs the serving Deployment's image,
// which the overlay sets (its `images:`): the migrate Job migrates with
// the binary that serves, the controller and the reconciler run the same
// release, and the base's placeholder name never reaches a cluster.
func TestImages(t *testing.T) { checkImages(t, thisRepo) }

func checkImages(t tb, r *repo) {
	s := loadServed(t, r)
	image := s.c.Image
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	switch {
	case !strings.Contains(name, "/"):
		t.Errorf("%s: image %q is the base's placeholder, not a registry's image: set it in the overlay's images: (newName, newTag or digest)", s.dep, image)
	case !strings.Contains(image, "@sha256:") && name == image:
		t.Errorf("%s: image %q has no tag or digest", s.dep, image)
	case strings.HasSuffix(image, ":latest"):
		t.Errorf("%s: image %q: latest is not a release; give the release's tag or digest", s.dep, image)
	}
	for _, o := range s.m.objects {
		spec, ok := podTemplateOf(t, o)
		if !ok {
			continue
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if c.Image != image {
				t.Errorf("%s: container %s runs %s, the serving Deployment %s: one release everywhere", o, c.Name, c.Image, image)
			}
		}
	}
}

// goMemLimit parses a GOMEMLIMIT value (runtime/debug.SetMemoryLimit's
// syntax: a number of bytes with an optional B, KiB, MiB, GiB or TiB).
func goMemLimit(v string) (int64, error) {
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(v)
	if m == nil {
		return 0, fmt.Errorf("%q is not a GOMEMLIMIT in bytes (e.g. 448MiB)", v)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, nil
}

// GOMEMLIMIT is the Go runtime's soft limit; the kernel kills a container
// at its hard memory limit. Every long-running container (a Deployment's)
// sets GOMEMLIMIT, and every container that sets it does so below its
// memory limit with headroom: at most nine tenths of it (memory the
// runtime does not count, and its overshoot while it collects), at least
// half (a limit set far below makes the runtime collect without need).
// A GOMEMLIMIT equal to the limit (a resourceFieldRef of limits.memory)
// leaves none.
func TestMemoryLimits(t *testing.T) { checkMemoryLimits(t, thisRepo) }

func checkMemoryLimits(t tb, r *repo) {
	m := loadManifests(t, r)
	for _, o := range m.objects {
		spec, ok := podTemplateOf(t, o)
		if !ok {
			continue
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			who := fmt.Sprintf("%s container %s", o, c.Name)
			i := slices.IndexFunc(c.Env, func(e envVar) bool { return e.Name == "GOMEMLIMIT" })
			if i < 0 {
				if o.Kind == "Deployment" {
					t.Errorf("%s: no GOMEMLIMIT: a long-running Go process with a memory limit should collect harder before the kernel kills it", who)
				}
				continue
			}
			e := c.Env[i]
			if e.ValueFrom != nil || e.Value == "" {
				t.Errorf("%s: GOMEMLIMIT is not a literal value below the memory limit (a resourceFieldRef of limits.memory sets it equal: no headroom)", who)
				continue
			}
			soft, err := goMemLimit(e.Value)
			if err != nil {
				t.Errorf("%s: GOMEMLIMIT: %v", who, err)
				continue
			}
			hard, err := resource.ParseQuantity(c.Resources.Limits["memory"])
			if err != nil || hard.Value() <= 0 {
				t.Errorf("%s: GOMEMLIMIT %s without a memory limit (%q)", who, e.Value, c.Resources.Limits["memory"])
				continue
			}
			ratio := float64(soft) / float64(hard.Value())
			if ratio > 0.9 || ratio < 0.5 {
				t.Errorf("%s: GOMEMLIMIT %s is %.0f%% of the memory limit %s; keep it between 50%% and 90%% (headroom for what the runtime does not count)",
					who, e.Value, 100*ratio, c.Resources.Limits["memory"])
			}
		}
	}
}

// Every Job, and every Job a CronJob makes, has an activeDeadlineSeconds:
// a Job that hangs (a database that never answers, a lock it waits on)
// fails in time instead of running, and holding its resources, forever.
// A CronJob forbids overlapping runs.
func TestJobDeadlines(t *testing.T) { checkJobDeadlines(t, thisRepo) }

func checkJobDeadlines(t tb, r *repo) {
	m := loadManifests(t, r)
	jobs := 0
	for _, o := range m.all("Job") {
		jobs++
		var spec jobSpec
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		if spec.ActiveDeadlineSeconds == nil || *spec.ActiveDeadlineSeconds <= 0 {
			t.Errorf("%s: no activeDeadlineSeconds: a Job that hangs runs forever", o)
		}
	}
	for _, o := range m.all("CronJob") {
		jobs++
		var spec cronJobSpec
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		if d := spec.JobTemplate.Spec.ActiveDeadlineSeconds; d == nil || *d <= 0 {
			t.Errorf("%s: its jobTemplate has no activeDeadlineSeconds: a run that hangs holds off every later one (concurrencyPolicy Forbid)", o)
		}
		if spec.ConcurrencyPolicy != "Forbid" {
			t.Errorf("%s: concurrencyPolicy %q, want Forbid: a run still going when the next is due would run beside it", o, spec.ConcurrencyPolicy)
		}
	}
	if jobs == 0 {
		t.Error("the example overlay renders no Job and no CronJob")
	}
}

// topology returns the topology the serving Deployment reads, the
// ${NAME}s it refers to and the Secret keys the Deployment fills them
// from.
func (s *served) topology(t tb) (text string, refs []string, env map[string]keyRef) {
	t.Helper()
	topoPath, _ := flagValue(slices.Concat(s.c.Command, s.c.Args), "topology")
	text, ok := mounted(s.m, s.spec.Template.Spec, s.c, topoPath, "ConfigMap")
	if !ok || text == "" {
		t.Fatalf("the topology %s is in no ConfigMap", topoPath)
	}
	var code []string // the topology without its comments
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			code = append(code, l)
		}
	}
	for _, m := range envRef.FindAllStringSubmatch(strings.Join(code, "\n"), -1) {
		refs = append(refs, m[1])
	}
	return text, refs, secretEnv(s.c)
}

// runs returns the objects of kind whose one container runs `reservoir
// words...` (each word a positional argument, in order), with that
// container and the pod spec.
func (s *served) runs(t tb, kind string, words ...string) (objs []*object, specs []podSpec, cs []container) {
	t.Helper()
	for _, o := range s.m.all(kind) {
		spec, ok := podTemplateOf(t, o)
		if !ok {
			continue
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			var pos []string
			for _, a := range slices.Concat(c.Command, c.Args) {
				if !strings.HasPrefix(a, "-") {
					pos = append(pos, a)
				}
			}
			if len(pos) >= len(words) && slices.Equal(pos[:len(words)], words) {
				objs, specs, cs = append(objs, o), append(specs, spec), append(cs, c)
			}
		}
	}
	return objs, specs, cs
}

// checkCompanion checks what every workload beside the serving Deployment
// must have in common with it: flags reservoir has, the security context
// and resources, the Secrets and ConfigMaps it uses present, and the
// serving Deployment's topology with its env; and that no Service, PDB or
// NetworkPolicy of the servers selects its pods (a Service that did would
// send checkout traffic to a pod with no listener).
func checkCompanion(t tb, s *served, o *object, spec podSpec, c container, labels map[string]string) {
	t.Helper()
	who := o.String()
	checkFlagsExist(t, who, slices.Concat(c.Command, c.Args), cliFlags(t, s.r))
	checkSecurity(t, who, spec.SecurityContext, c)
	checkRefs(t, s.m, who, spec)
	text, refs, env := s.topology(t)
	checkReadsTopology(t, s.m, who, spec, c, text, refs, env)
	for _, sel := range s.selectors(t) {
		if subset(sel.labels, labels) {
			t.Errorf("%s: %s selects its pods (%v): give them a component label of their own", who, sel.who, labels)
		}
	}
}

type selector struct {
	who    string
	labels map[string]string
}

// selectors returns the pod selectors of the Services, the
// PodDisruptionBudgets and the NetworkPolicies.
func (s *served) selectors(t tb) []selector {
	t.Helper()
	var out []selector
	for _, o := range s.m.objects {
		var spec struct {
			Selector    yaml.Node     `yaml:"selector"`
			PodSelector labelSelector `yaml:"podSelector"`
		}
		switch o.Kind {
		case "Service", "PodDisruptionBudget", "NetworkPolicy":
		default:
			continue
		}
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		var labels map[string]string
		switch o.Kind {
		case "Service":
			_ = spec.Selector.Decode(&labels)
		case "PodDisruptionBudget":
			var ls labelSelector
			_ = spec.Selector.Decode(&ls)
			labels = ls.MatchLabels
		case "NetworkPolicy":
			labels = spec.PodSelector.MatchLabels
		}
		out = append(out, selector{o.String(), labels})
	}
	return out
}

// `reservoir rollout auto` runs as one Deployment of exactly one replica,
// replaced by Recreate (two controllers would judge the same gates twice),
// never --once (a Deployment would restart it after each step), with a
// plan that parses and lists exactly the topology's pods, and otherwise
// as the serving Deployment runs (image, topology, env, security).
func TestRolloutAuto(t *testing.T) { checkRolloutAuto(t, thisRepo) }

func checkRolloutAuto(t tb, r *repo) {
	s := loadServed(t, r)
	objs, specs, cs := s.runs(t, "Deployment", "rollout", "auto")
	if len(objs) != 1 {
		t.Fatalf("%d Deployments run `reservoir rollout auto`, want 1", len(objs))
	}
	o, spec, c := objs[0], specs[0], cs[0]
	var dep deploymentSpec
	if err := o.Spec.Decode(&dep); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
	switch {
	case dep.Replicas > 1:
		t.Errorf("%s: replicas %d, want 1: two controllers judge the same gates twice and race to write the flags", o, dep.Replicas)
	case dep.Replicas < 1:
		t.Errorf("%s: replicas %d, want 1: no controller runs", o, dep.Replicas)
	case dep.Strategy.Type != "Recreate":
		t.Errorf("%s: strategy %q, want Recreate: a rolling update runs the old controller beside the new one", o, dep.Strategy.Type)
	}
	if !subset(dep.Selector.MatchLabels, dep.Template.Metadata.Labels) {
		t.Errorf("%s: selector %v does not select the template's labels %v", o, dep.Selector.MatchLabels, dep.Template.Metadata.Labels)
	}
	args := slices.Concat(c.Command, c.Args)
	if slices.Contains(args, "--once") || slices.Contains(args, "-once") {
		t.Errorf("%s: --once: the controller exits after one step, and the Deployment restarts it in a crash loop", o)
	}
	checkCompanion(t, s, o, spec, c, dep.Template.Metadata.Labels)

	// The plan: a ConfigMap's key, valid, over the topology's pods.
	p, ok := flagValue(args, "plan")
	if !ok {
		t.Errorf("%s: no --plan: the topology's plan_file would be a path on the operator's machine", o)
		return
	}
	text, ok := mounted(s.m, spec, c, p, "ConfigMap")
	if !ok {
		t.Errorf("%s: --plan %s is not a key of a ConfigMap mounted at its directory", o, p)
		return
	}
	plan, err := rollout.ParsePlan([]byte(text))
	if err != nil {
		t.Errorf("%s: the plan %s: %v", o, p, err)
		return
	}
	topoText, refs, env := s.topology(t)
	for _, name := range refs {
		ref := env[name]
		t.Setenv(name, s.m.keys("Secret", ref.Name)[ref.Key])
	}
	topo, err := topology.Parse([]byte(topoText))
	if err != nil {
		t.Fatalf("the topology: %v", err)
	}
	if pods := topo.PodNames(); !sameSet(plan.Pods, pods) {
		t.Errorf("%s: the plan lists the pods %v, the topology has %v: the controller would refuse it or leave pods out", o, plan.Pods, pods)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// `reservoir reconcile` runs on a schedule, as a CronJob whose runs never
// overlap and each end in time, and otherwise as the serving Deployment
// runs (image, topology, env, security).
func TestReconcileCronJob(t *testing.T) { checkReconcileCronJob(t, thisRepo) }

func checkReconcileCronJob(t tb, r *repo) {
	s := loadServed(t, r)
	objs, specs, cs := s.runs(t, "CronJob", "reconcile")
	if len(objs) != 1 {
		t.Fatalf("%d CronJobs run `reservoir reconcile`, want 1", len(objs))
	}
	o, spec, c := objs[0], specs[0], cs[0]
	var cj cronJobSpec
	if err := o.Spec.Decode(&cj); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
	if len(strings.Fields(cj.Schedule)) != 5 {
		t.Errorf("%s: schedule %q is not a five-field cron schedule", o, cj.Schedule)
	}
	if rp := cj.JobTemplate.Spec.Template.Spec.RestartPolicy; rp != "Never" {
		t.Errorf("%s: restartPolicy %q, want Never: drift exits 1, and a restart in place would only report it again", o, rp)
	}
	if _, ok := flagValue(slices.Concat(c.Command, c.Args), "resume"); ok || slices.Contains(c.Args, "--resume") {
		t.Errorf("%s: --resume: each run starts from the first shop (its checkpoint would be lost with the pod anyway)", o)
	}
	checkCompanion(t, s, o, spec, c, cj.JobTemplate.Spec.Template.Metadata.Labels)
}

// servingTag is the build tag the image's binary is built with: it leaves
// out `reservoir bench` (internal/cli/bench_nobench.go).
const servingTag = "nobench"

// buildTags returns the tags of the go build in run (-tags a,b or
// -tags=a,b).
func buildTags(run string) []string {
	m := regexp.MustCompile(`(?:^|\s)-tags[= ]"?([A-Za-z0-9_.,]+)`).FindStringSubmatch(run)
	if m == nil {
		return nil
	}
	return strings.Split(m[1], ",")
}

var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Every base image is pulled by digest: a tag names whatever was pushed
// under it last, a digest one image. The digest is written in the FROM
// line, or is a build ARG whose default is a digest or that has none (the
// build then stops without it, rather than fall back to the tag).
func checkPinned(t tb, d *dockerfile) {
	t.Helper()
	for i, st := range d.stages {
		if slices.ContainsFunc(d.stages[:i], func(p stage) bool { return p.name != "" && p.name == st.from }) {
			continue // FROM an earlier stage
		}
		_, digest, ok := strings.Cut(st.from, "@")
		arg := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(digest, "${"), "$"), "}")
		def, declared := d.args[arg]
		switch {
		case !ok:
			t.Errorf("Dockerfile: FROM %s is pinned by tag only: give its digest (@sha256:...)", st.from)
		case sha256Digest.MatchString(digest):
		case arg == digest:
			t.Errorf("Dockerfile: FROM %s: %q is not a sha256 digest", st.from, digest)
		case !declared:
			t.Errorf("Dockerfile: FROM %s: no ARG %s before the first FROM", st.from, arg)
		case def != "" && !sha256Digest.MatchString(strings.Trim(def, `"`)):
			t.Errorf("Dockerfile: FROM %s: ARG %s's default %q is not a sha256 digest", st.from, arg, def)
		}
	}
}

// The build stage runs on the builder's own platform and cross-compiles
// for each target (GOOS and GOARCH from buildx's TARGETOS and
// TARGETARCH), so one `docker buildx build --platform
// linux/amd64,linux/arm64` makes a multi-platform image without
// emulating the compiler.
func checkPlatforms(t tb, build stage) {
	t.Helper()
	if p := build.platform; p != "$BUILDPLATFORM" && p != "${BUILDPLATFORM}" {
		t.Errorf("Dockerfile: the build stage runs FROM --platform=%q, want $BUILDPLATFORM: every target platform's compiler would run emulated", p)
	}
	built := strings.Join(build.runs, "\n")
	for _, v := range []struct{ env, arg string }{{"GOOS", "TARGETOS"}, {"GOARCH", "TARGETARCH"}} {
		if _, ok := build.args[v.arg]; !ok {
			t.Errorf("Dockerfile: the build stage declares no ARG %s (buildx sets it for each --platform)", v.arg)
		}
		if !strings.Contains(built, v.env+"=$"+v.arg) && !strings.Contains(built, v.env+"=${"+v.arg+"}") {
			t.Errorf("Dockerfile: the build does not set %s=$%s: every platform's image would hold the builder's binary", v.env, v.arg)
		}
	}
}

// The image says what it is, in the OCI annotation keys registries and
// scanners read: its source, title and description, and the version and
// revision the release builds (build ARGs of the final stage).
func checkLabels(t tb, run stage) {
	t.Helper()
	const oci = "org.opencontainers.image."
	for _, l := range []struct{ key, arg string }{{"source", ""}, {"title", ""}, {"description", ""}, {"version", "VERSION"}, {"revision", "REVISION"}} {
		v, ok := run.labels[oci+l.key]
		switch {
		case !ok || v == "":
			t.Errorf("Dockerfile: the final stage has no LABEL %s%s", oci, l.key)
		case l.arg == "":
		case v != "${"+l.arg+"}" && v != "$"+l.arg:
			t.Errorf("Dockerfile: LABEL %s%s is %q, want ${%s}, a build ARG the release sets", oci, l.key, v, l.arg)
		default:
			if _, ok := run.args[l.arg]; !ok {
				t.Errorf("Dockerfile: the final stage declares no ARG %s: its LABEL %s%s would be empty", l.arg, oci, l.key)
			}
		}
	}
}
