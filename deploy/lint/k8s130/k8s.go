package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The API versions a Kubernetes 1.30 cluster serves for the kinds deploy/
// may use. Only these are registered, so a removed or beta version (say
// policy/v1beta1) fails to decode even though k8s.io/api still has its types.
func k8sScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
		networkingv1.AddToScheme, rbacv1.AddToScheme, autoscalingv2.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// k8sObject is one decoded manifest document.
type k8sObject struct {
	where string // file#index
	kind  string
	name  string
	ns    string
	obj   runtime.Object
}

// podTemplate is a pod spec with its labels, from a workload or a Pod.
type podTemplate struct {
	where    string
	owner    string // Kind/name
	ns       string
	labels   map[string]string
	spec     *corev1.PodSpec
	longLive bool // Deployment or Pod (Services may select it), not a Job
	replicas int32
}

// k8sRefs are the ConfigMaps, Secrets and ServiceAccounts the pods refer to.
type k8sRefs struct{ configMaps, secrets, serviceAccounts map[string][]string }

func lintK8s(p *problems, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		p.add(dir, "no *.yaml manifests found")
		return
	}
	sort.Strings(files)
	decoder := serializer.NewCodecFactory(k8sScheme(), serializer.EnableStrict).UniversalDeserializer()
	var objs []k8sObject
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			p.add(f, "%v", err)
			continue
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				p.add(f, "document %d: %v", i, err)
				break
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			where := f + "#" + strconv.Itoa(i)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				p.add(where, "not YAML: %v", err)
				continue
			}
			if tm.Kind == "Kustomization" {
				lintKustomization(p, where, dir, doc)
				continue
			}
			obj, gvk, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				p.add(where, "%s %s: %v", tm.APIVersion, tm.Kind, err)
				// A strict-decoding error (unknown or duplicate field) still
				// yields the object: check the rest of it too.
				if !runtime.IsStrictDecodingError(err) || obj == nil {
					continue
				}
			}
			m, err := metaOf(obj)
			if err != nil {
				p.add(where, "%v", err)
				continue
			}
			objs = append(objs, k8sObject{where: where, kind: gvk.Kind, name: m.Name, ns: m.Namespace, obj: obj})
			lintMeta(p, where, gvk.Kind, m)
		}
	}
	lintK8sObjects(p, objs)
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		t := bytes.TrimSpace(l)
		if len(t) == 0 || t[0] == '#' || string(t) == "---" {
			continue
		}
		out.Write(l)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

func metaOf(obj runtime.Object) (*metav1.ObjectMeta, error) {
	a, ok := obj.(metav1.ObjectMetaAccessor)
	if !ok {
		return nil, errors.New("object without metadata")
	}
	return a.GetObjectMeta().(*metav1.ObjectMeta), nil
}

func lintMeta(p *problems, where, kind string, m *metav1.ObjectMeta) {
	var errs []string
	switch kind {
	case "Namespace":
		errs = validation.IsDNS1123Label(m.Name)
	case "Service":
		errs = validation.IsDNS1035Label(m.Name)
	default:
		errs = validation.IsDNS1123Subdomain(m.Name)
	}
	for _, e := range errs {
		p.add(where, "%s name %q: %s", kind, m.Name, e)
	}
	if kind != "Namespace" && m.Namespace == "" {
		p.add(where, "%s %s has no metadata.namespace", kind, m.Name)
	}
	lintLabels(p, where, "metadata.labels", m.Labels)
	for k := range m.Annotations {
		for _, e := range validation.IsQualifiedName(k) {
			p.add(where, "annotation %q: %s", k, e)
		}
	}
}

func lintLabels(p *problems, where, field string, l map[string]string) {
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			p.add(where, "%s key %q: %s", field, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			p.add(where, "%s %s=%q: %s", field, k, v, e)
		}
	}
}

func lintKustomization(p *problems, where, dir string, doc []byte) {
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Images     []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
			Digest  string `json:"digest"`
		} `json:"images"`
		Namespace string `json:"namespace"`
	}
	if err := yaml.UnmarshalStrict(doc, &k); err != nil {
		p.add(where, "kustomization (fields checked: apiVersion, kind, resources, images, namespace): %v", err)
		return
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" {
		p.add(where, "kustomization apiVersion %q, want kustomize.config.k8s.io/v1beta1", k.APIVersion)
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
			p.add(where, "resource %s: %v", r, err)
		}
	}
	for _, im := range k.Images {
		if im.Name == "" || (im.NewTag == "" && im.NewName == "" && im.Digest == "") {
			p.add(where, "images entry %q changes nothing", im.Name)
		}
	}
}

func lintK8sObjects(p *problems, objs []k8sObject) {
	refs := k8sRefs{configMaps: map[string][]string{}, secrets: map[string][]string{}, serviceAccounts: map[string][]string{}}
	declared := map[string]bool{} // Kind/ns/name
	var pods []podTemplate
	envFromConfigMaps := map[string]bool{}
	for _, o := range objs {
		key := o.kind + "/" + o.ns + "/" + o.name
		if declared[key] {
			p.add(o.where, "%s %s/%s declared twice", o.kind, o.ns, o.name)
		}
		declared[key] = true
		switch x := o.obj.(type) {
		case *appsv1.Deployment:
			lintDeployment(p, o.where, x)
			r := int32(1)
			if x.Spec.Replicas != nil {
				r = *x.Spec.Replicas
			}
			pods = append(pods, podTemplate{o.where, "Deployment/" + x.Name, x.Namespace, x.Spec.Template.Labels, &x.Spec.Template.Spec, true, r})
		case *batchv1.Job:
			if rp := x.Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
				p.add(o.where, "Job %s: restartPolicy must be OnFailure or Never, not %q", x.Name, rp)
			}
			pods = append(pods, podTemplate{o.where, "Job/" + x.Name, x.Namespace, x.Spec.Template.Labels, &x.Spec.Template.Spec, false, 1})
		case *corev1.Pod:
			pods = append(pods, podTemplate{o.where, "Pod/" + x.Name, x.Namespace, x.Labels, &x.Spec, true, 1})
		case *corev1.ConfigMap:
			for k := range x.Data {
				for _, e := range validation.IsConfigMapKey(k) {
					p.add(o.where, "ConfigMap %s key %q: %s", x.Name, k, e)
				}
			}
		case *corev1.Secret:
			for k := range x.StringData {
				for _, e := range validation.IsConfigMapKey(k) {
					p.add(o.where, "Secret %s key %q: %s", x.Name, k, e)
				}
			}
			if x.Type == corev1.SecretTypeTLS {
				for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
					if _, ok := x.StringData[k]; !ok {
						if _, ok := x.Data[k]; !ok {
							p.add(o.where, "Secret %s of type %s lacks key %s", x.Name, x.Type, k)
						}
					}
				}
			}
		}
	}
	for _, pt := range pods {
		lintPodSpec(p, pt, &refs, envFromConfigMaps)
	}
	for name, wheres := range refs.configMaps {
		if !declared["ConfigMap/"+name] {
			p.add(wheres[0], "ConfigMap %s is referenced but not declared in any manifest (declare it, or its example in secrets.example.yaml)", strings.TrimPrefix(name, "/"))
		}
	}
	for name, wheres := range refs.secrets {
		if !declared["Secret/"+name] {
			p.add(wheres[0], "Secret %s is referenced but not declared (secrets.example.yaml documents every Secret)", name)
		}
	}
	for name, wheres := range refs.serviceAccounts {
		if !declared["ServiceAccount/"+name] {
			p.add(wheres[0], "ServiceAccount %s is referenced but not declared", name)
		}
	}
	// ConfigMaps used with envFrom: every key must be a valid variable name.
	for _, o := range objs {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok && envFromConfigMaps[cm.Namespace+"/"+cm.Name] {
			for k := range cm.Data {
				for _, e := range validation.IsEnvVarName(k) {
					p.add(o.where, "ConfigMap %s is used with envFrom; key %q: %s", cm.Name, k, e)
				}
			}
		}
	}
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *corev1.Service:
			lintService(p, o.where, x, pods)
		case *policyv1.PodDisruptionBudget:
			lintPDB(p, o.where, x, pods)
		case *networkingv1.NetworkPolicy:
			lintNetworkPolicy(p, o.where, x, pods)
		}
	}
}

func lintDeployment(p *problems, where string, d *appsv1.Deployment) {
	if d.Spec.Selector == nil {
		p.add(where, "Deployment %s: spec.selector is required", d.Name)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		p.add(where, "Deployment %s: selector: %v", d.Name, err)
		return
	}
	if sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		p.add(where, "Deployment %s: selector %s does not match the pod template's labels", d.Name, sel)
	}
	if d.Spec.Replicas != nil && *d.Spec.Replicas < 1 {
		p.add(where, "Deployment %s: replicas %d", d.Name, *d.Spec.Replicas)
	}
	if rp := d.Spec.Template.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyAlways {
		p.add(where, "Deployment %s: restartPolicy must be Always", d.Name)
	}
}

// lintPodSpec checks a pod spec for consistency and against the
// "restricted" Pod Security Standard that namespace.yaml enforces.
func lintPodSpec(p *problems, pt podTemplate, refs *k8sRefs, envFromCM map[string]bool) {
	w, s := pt.where, pt.spec
	lintLabels(p, w, pt.owner+" pod labels", pt.labels)
	if len(s.Containers) == 0 {
		p.add(w, "%s: no containers", pt.owner)
	}
	if s.HostNetwork || s.HostPID || s.HostIPC {
		p.add(w, "%s: host namespaces are not allowed", pt.owner)
	}
	if s.ServiceAccountName != "" && s.ServiceAccountName != "default" {
		refs.serviceAccounts[pt.ns+"/"+s.ServiceAccountName] = append(refs.serviceAccounts[pt.ns+"/"+s.ServiceAccountName], w)
	}
	psc := s.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	volumes := map[string]bool{}
	used := map[string]bool{}
	for _, v := range s.Volumes {
		if volumes[v.Name] {
			p.add(w, "%s: volume %s declared twice", pt.owner, v.Name)
		}
		volumes[v.Name] = true
		for _, e := range validation.IsDNS1123Label(v.Name) {
			p.add(w, "%s: volume name %q: %s", pt.owner, v.Name, e)
		}
		switch {
		case v.HostPath != nil:
			p.add(w, "%s: hostPath volume %s is not allowed", pt.owner, v.Name)
		case v.Secret != nil:
			if v.Secret.SecretName == "" {
				p.add(w, "%s: volume %s: secretName is empty", pt.owner, v.Name)
			}
			refs.secrets[pt.ns+"/"+v.Secret.SecretName] = append(refs.secrets[pt.ns+"/"+v.Secret.SecretName], w)
			checkMode(p, w, pt.owner, v.Name, v.Secret.DefaultMode)
		case v.ConfigMap != nil:
			refs.configMaps[pt.ns+"/"+v.ConfigMap.Name] = append(refs.configMaps[pt.ns+"/"+v.ConfigMap.Name], w)
			checkMode(p, w, pt.owner, v.Name, v.ConfigMap.DefaultMode)
		}
	}
	names := map[string]bool{}
	all := append(append([]corev1.Container{}, s.InitContainers...), s.Containers...)
	for _, c := range all {
		cw := pt.owner + " container " + c.Name
		if names[c.Name] {
			p.add(w, "%s: container name %s used twice", pt.owner, c.Name)
		}
		names[c.Name] = true
		for _, e := range validation.IsDNS1123Label(c.Name) {
			p.add(w, "%s: name: %s", cw, e)
		}
		if c.Image == "" {
			p.add(w, "%s: image is empty", cw)
		}
		ports := map[string]int32{}
		numbers := map[int32]bool{}
		for _, port := range c.Ports {
			if port.Name != "" {
				for _, e := range validation.IsValidPortName(port.Name) {
					p.add(w, "%s: port name %q: %s", cw, port.Name, e)
				}
				if _, dup := ports[port.Name]; dup {
					p.add(w, "%s: port name %s used twice", cw, port.Name)
				}
				ports[port.Name] = port.ContainerPort
			}
			if numbers[port.ContainerPort] {
				p.add(w, "%s: containerPort %d used twice", cw, port.ContainerPort)
			}
			numbers[port.ContainerPort] = true
		}
		for _, pr := range []struct {
			name string
			pb   *corev1.Probe
		}{{"startupProbe", c.StartupProbe}, {"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}} {
			if pr.pb == nil || pr.pb.HTTPGet == nil {
				continue
			}
			if !strings.HasPrefix(pr.pb.HTTPGet.Path, "/") {
				p.add(w, "%s: %s path %q must start with /", cw, pr.name, pr.pb.HTTPGet.Path)
			}
			if pt := pr.pb.HTTPGet.Port; pt.Type == intstr.String {
				if _, ok := ports[pt.StrVal]; !ok {
					p.add(w, "%s: %s port %q is not a named port of the container", cw, pr.name, pt.StrVal)
				}
			}
		}
		mounts := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				p.add(w, "%s: volumeMount %s names no volume", cw, m.Name)
			}
			used[m.Name] = true
			if !strings.HasPrefix(m.MountPath, "/") {
				p.add(w, "%s: mountPath %q is not absolute", cw, m.MountPath)
			}
			if mounts[m.MountPath] {
				p.add(w, "%s: mountPath %s used twice", cw, m.MountPath)
			}
			mounts[m.MountPath] = true
		}
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				p.add(w, "%s: env %q: %s", cw, e.Name, msg)
			}
			if e.ValueFrom != nil {
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					if r.Name == "" || r.Key == "" {
						p.add(w, "%s: env %s: secretKeyRef needs name and key", cw, e.Name)
					}
					refs.secrets[pt.ns+"/"+r.Name] = append(refs.secrets[pt.ns+"/"+r.Name], w)
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					refs.configMaps[pt.ns+"/"+r.Name] = append(refs.configMaps[pt.ns+"/"+r.Name], w)
				}
			}
		}
		for _, ef := range c.EnvFrom {
			if r := ef.ConfigMapRef; r != nil {
				refs.configMaps[pt.ns+"/"+r.Name] = append(refs.configMaps[pt.ns+"/"+r.Name], w)
				envFromCM[pt.ns+"/"+r.Name] = true
			}
			if r := ef.SecretRef; r != nil {
				refs.secrets[pt.ns+"/"+r.Name] = append(refs.secrets[pt.ns+"/"+r.Name], w)
			}
		}
		for res, req := range c.Resources.Requests {
			if lim, ok := c.Resources.Limits[res]; ok && req.Cmp(lim) > 0 {
				p.add(w, "%s: %s request %s exceeds its limit %s", cw, res, req.String(), lim.String())
			}
		}
		if c.Resources.Requests == nil || c.Resources.Limits.Memory().IsZero() {
			p.add(w, "%s: set resource requests and a memory limit", cw)
		}
		// Restricted Pod Security Standard, plus a read-only root filesystem.
		sc := c.SecurityContext
		if sc == nil {
			p.add(w, "%s: no securityContext", cw)
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			p.add(w, "%s: privileged", cw)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			p.add(w, "%s: set allowPrivilegeEscalation: false", cw)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			p.add(w, "%s: set readOnlyRootFilesystem: true", cw)
		}
		if sc.Capabilities == nil || !dropsAll(sc.Capabilities.Drop) {
			p.add(w, "%s: capabilities must drop ALL", cw)
		} else if len(sc.Capabilities.Add) > 0 {
			p.add(w, "%s: adds capabilities %v", cw, sc.Capabilities.Add)
		}
		if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
			p.add(w, "%s: runAsNonRoot must be true (container or pod)", cw)
		}
		if isZero(sc.RunAsUser) || (sc.RunAsUser == nil && isZero(psc.RunAsUser)) {
			p.add(w, "%s: runs as UID 0", cw)
		}
		if !seccompOK(sc.SeccompProfile) && !seccompOK(psc.SeccompProfile) {
			p.add(w, "%s: seccompProfile must be RuntimeDefault or Localhost (container or pod)", cw)
		}
	}
	for v := range volumes {
		if !used[v] {
			p.add(w, "%s: volume %s is mounted by no container", pt.owner, v)
		}
	}
}

func checkMode(p *problems, w, owner, vol string, mode *int32) {
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		p.add(w, "%s: volume %s defaultMode %o is out of range (0-0777)", owner, vol, *mode)
	}
}

func dropsAll(c []corev1.Capability) bool {
	for _, x := range c {
		if x == "ALL" {
			return true
		}
	}
	return false
}

func isTrue(b *bool) bool  { return b != nil && *b }
func isZero(u *int64) bool { return u != nil && *u == 0 }
func seccompOK(s *corev1.SeccompProfile) bool {
	return s != nil && (s.Type == corev1.SeccompProfileTypeRuntimeDefault || s.Type == corev1.SeccompProfileTypeLocalhost)
}

// selected returns the pod templates in ns whose labels sel matches.
func selected(pods []podTemplate, ns string, sel labels.Selector, longLivedOnly bool) []podTemplate {
	var out []podTemplate
	for _, pt := range pods {
		if pt.ns == ns && (!longLivedOnly || pt.longLive) && sel.Matches(labels.Set(pt.labels)) {
			out = append(out, pt)
		}
	}
	return out
}

// hasPort reports whether a container of the pods has the port (by name or number).
func hasPort(pods []podTemplate, port intstr.IntOrString) bool {
	for _, pt := range pods {
		for _, c := range pt.spec.Containers {
			for _, cp := range c.Ports {
				if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
					return true
				}
			}
		}
	}
	return false
}

func lintService(p *problems, where string, s *corev1.Service, pods []podTemplate) {
	if len(s.Spec.Selector) == 0 {
		p.add(where, "Service %s has no selector", s.Name)
		return
	}
	got := selected(pods, s.Namespace, labels.SelectorFromSet(s.Spec.Selector), true)
	if len(got) == 0 {
		p.add(where, "Service %s: selector %v matches no Deployment or Pod", s.Name, s.Spec.Selector)
	}
	for _, pt := range got {
		if pt.owner != "" && strings.HasPrefix(pt.owner, "Pod/") {
			p.add(where, "Service %s also selects %s; give that pod other labels", s.Name, pt.owner)
		}
	}
	for _, port := range s.Spec.Ports {
		if len(s.Spec.Ports) > 1 && port.Name == "" {
			p.add(where, "Service %s: every port needs a name when there are several", s.Name)
		}
		if port.Name != "" {
			for _, e := range validation.IsValidPortName(port.Name) {
				p.add(where, "Service %s port name %q: %s", s.Name, port.Name, e)
			}
		}
		target := port.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(port.Port)
		}
		if len(got) > 0 && !hasPort(got, target) {
			p.add(where, "Service %s: targetPort %s is not a port of the selected pods", s.Name, target.String())
		}
	}
}

func lintPDB(p *problems, where string, d *policyv1.PodDisruptionBudget, pods []podTemplate) {
	if d.Spec.Selector == nil {
		p.add(where, "PodDisruptionBudget %s has no selector", d.Name)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		p.add(where, "PodDisruptionBudget %s: %v", d.Name, err)
		return
	}
	got := selected(pods, d.Namespace, sel, true)
	if len(got) == 0 {
		p.add(where, "PodDisruptionBudget %s selects no Deployment", d.Name)
		return
	}
	var replicas int32
	for _, pt := range got {
		replicas += pt.replicas
	}
	if d.Spec.MinAvailable != nil && d.Spec.MinAvailable.Type == intstr.Int && d.Spec.MinAvailable.IntVal >= replicas {
		p.add(where, "PodDisruptionBudget %s: minAvailable %d leaves no disruption allowed with %d replicas", d.Name, d.Spec.MinAvailable.IntVal, replicas)
	}
}

func lintNetworkPolicy(p *problems, where string, np *networkingv1.NetworkPolicy, pods []podTemplate) {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		p.add(where, "NetworkPolicy %s: %v", np.Name, err)
		return
	}
	got := selected(pods, np.Namespace, sel, true)
	if len(got) == 0 {
		p.add(where, "NetworkPolicy %s selects no Deployment", np.Name)
	}
	for i, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			for _, s := range []*metav1.LabelSelector{peer.PodSelector, peer.NamespaceSelector} {
				if s == nil {
					continue
				}
				if _, err := metav1.LabelSelectorAsSelector(s); err != nil {
					p.add(where, "NetworkPolicy %s ingress[%d]: %v", np.Name, i, err)
				}
			}
		}
		for _, port := range rule.Ports {
			if port.Port != nil && len(got) > 0 && !hasPort(got, *port.Port) {
				p.add(where, "NetworkPolicy %s ingress[%d]: port %s is not a port of the selected pods", np.Name, i, port.Port.String())
			}
		}
	}
	for _, t := range np.Spec.PolicyTypes {
		if t != networkingv1.PolicyTypeIngress && t != networkingv1.PolicyTypeEgress {
			p.add(where, "NetworkPolicy %s: policyType %q", np.Name, t)
		}
	}
}
