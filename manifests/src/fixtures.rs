//! Test fixtures (feature `fixtures`): a small kfctl-style manifests repository in both layouts,
//! GitHub-style tarballs of it, hostile tarballs, and a loopback HTTP server (files, or git's own).
//!
//! The repository (shapes taken from kubeflow/manifests v1.0 and v1.2):
//! - `demo/web-app`: `base/` (namespace, namePrefix-free names, commonLabels, ClusterRole +
//!   ClusterRoleBinding + ServiceAccount, Service, Deployment, `configMapGenerator` from
//!   `params.env`, `vars` with a `configurations` file) and `overlays/application` (bases
//!   `../../base`, an `Application`, more commonLabels) and `overlays/istio` (no bases, a
//!   VirtualService using a var through its own `configurations`, its own `params.env`);
//! - `demo/webhook`: a flat package (no `base/`) with a Namespace, a CRD and a custom resource of
//!   it, a MutatingWebhookConfiguration, a Deployment and a ClusterRole loaded from
//!   `demo/common/`, outside the package folder;
//! - `demo/broken`: a package kustomize rejects (a resource that does not exist);
//! - `demo/legacy`: a flat package in API versions Kubernetes removed (v1beta1 CRD, RBAC, webhook,
//!   PodDisruptionBudget, CronJob, PriorityClass; extensions/v1beta1 Deployment and Ingress;
//!   apps/v1beta2 StatefulSet; autoscaling/v2beta1), and `stacks/legacy` taking it as a base;
//! - `namespaces/base` and `stacks/kubernetes` (v1.2 style: `application/<app>` kustomizations
//!   that take `../../../../demo/...` as bases and merge their own `params.env`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use kubeflow_crds::KfDef;

/// Top folder of the fixture tarball, as GitHub names it (`<repo>-<ref>`).
pub const TOP_FOLDER: &str = "manifests-1.0.2";

const FILES: &[(&str, &str)] = &[
    // --- demo/web-app/base
    (
        "demo/web-app/base/kustomization.yaml",
        r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kubeflow
commonLabels:
  app: web-app
  kustomize.component: web-app
resources:
- cluster-role.yaml
- cluster-role-binding.yaml
- service-account.yaml
- service.yaml
- deployment.yaml
configMapGenerator:
- name: web-app-parameters
  env: params.env
generatorOptions:
  disableNameSuffixHash: true
vars:
- name: userid-header
  objref:
    kind: ConfigMap
    name: web-app-parameters
    apiVersion: v1
  fieldref:
    fieldpath: data.userid-header
- name: web-app-namespace
  objref:
    kind: Service
    name: web-app
    apiVersion: v1
  fieldref:
    fieldpath: metadata.namespace
configurations:
- params.yaml
"#,
    ),
    (
        "demo/web-app/base/params.env",
        "userid-header=\nclusterDomain=cluster.local\nnamespace=\n",
    ),
    (
        "demo/web-app/base/params.yaml",
        "varReference:\n- path: metadata/annotations\n  kind: Deployment\n",
    ),
    (
        "demo/web-app/base/cluster-role.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: web-app-cluster-role\nrules:\n- apiGroups: [\"\"]\n  resources: [namespaces]\n  verbs: [get, list]\n",
    ),
    (
        "demo/web-app/base/cluster-role-binding.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: web-app-binding\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: web-app-cluster-role\nsubjects:\n- kind: ServiceAccount\n  name: web-app\n  namespace: kubeflow\n",
    ),
    (
        "demo/web-app/base/service-account.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: web-app\n",
    ),
    (
        "demo/web-app/base/service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web-app\nspec:\n  ports:\n  - port: 80\n    targetPort: 5000\n",
    ),
    (
        "demo/web-app/base/deployment.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-app
  annotations:
    demo.kubeflow.org/served-from: $(web-app-namespace)
spec:
  replicas: 1
  template:
    spec:
      serviceAccountName: web-app
      containers:
      - name: web-app
        image: gcr.io/kubeflow-images-public/web-app:v1.0.0
        env:
        - name: USERID_HEADER
          value: $(userid-header)
"#,
    ),
    // --- demo/web-app/overlays/application
    (
        "demo/web-app/overlays/application/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nbases:\n- ../../base\nresources:\n- application.yaml\ncommonLabels:\n  app.kubernetes.io/name: web-app\n",
    ),
    (
        "demo/web-app/overlays/application/application.yaml",
        "apiVersion: app.k8s.io/v1beta1\nkind: Application\nmetadata:\n  name: web-app\nspec:\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: web-app\n",
    ),
    // --- demo/web-app/overlays/istio
    (
        "demo/web-app/overlays/istio/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- virtual-service.yaml\nconfigMapGenerator:\n- name: web-app-istio-parameters\n  env: params.env\ngeneratorOptions:\n  disableNameSuffixHash: true\nconfigurations:\n- params.yaml\n",
    ),
    (
        "demo/web-app/overlays/istio/params.env",
        "gateway=kubeflow/kubeflow-gateway\n",
    ),
    (
        "demo/web-app/overlays/istio/params.yaml",
        "varReference:\n- path: spec/http/route/destination/host\n  kind: VirtualService\n",
    ),
    (
        "demo/web-app/overlays/istio/virtual-service.yaml",
        "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\nmetadata:\n  name: web-app\nspec:\n  gateways:\n  - kubeflow-gateway\n  hosts: ['*']\n  http:\n  - route:\n    - destination:\n        host: web-app.$(web-app-namespace).svc.cluster.local\n        port:\n          number: 80\n",
    ),
    // --- demo/webhook (flat) and demo/common
    (
        "demo/webhook/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- webhook-configuration.yaml\n- custom-resource.yaml\n- deployment.yaml\n- crd.yaml\n- namespace.yaml\n- ../common/webhook-cluster-role.yaml\n",
    ),
    ("demo/webhook/params.env", "namespace=\n"),
    (
        "demo/webhook/namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo-tenants\n",
    ),
    (
        "demo/webhook/crd.yaml",
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: tenants.demo.kubeflow.org
spec:
  group: demo.kubeflow.org
  names:
    kind: Tenant
    plural: tenants
    singular: tenant
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#,
    ),
    (
        "demo/webhook/custom-resource.yaml",
        "apiVersion: demo.kubeflow.org/v1\nkind: Tenant\nmetadata:\n  name: default-tenant\nspec:\n  owner: admin@example.com\n",
    ),
    (
        "demo/webhook/webhook-configuration.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: tenant-defaulter\nwebhooks:\n- name: tenants.demo.kubeflow.org\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  clientConfig:\n    service:\n      name: tenant-webhook\n      namespace: kubeflow\n      path: /mutate\n  rules:\n  - apiGroups: [demo.kubeflow.org]\n    apiVersions: [v1]\n    operations: [CREATE]\n    resources: [tenants]\n",
    ),
    (
        "demo/webhook/deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: tenant-webhook\nspec:\n  selector:\n    matchLabels: {app: tenant-webhook}\n  template:\n    metadata:\n      labels: {app: tenant-webhook}\n    spec:\n      containers:\n      - name: webhook\n        image: gcr.io/kubeflow-images-public/tenant-webhook:v1.0.0\n",
    ),
    (
        "demo/common/webhook-cluster-role.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: tenant-webhook\nrules:\n- apiGroups: [demo.kubeflow.org]\n  resources: [tenants]\n  verbs: [get, list, watch]\n",
    ),
    // --- demo/broken
    (
        "demo/broken/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- does-not-exist.yaml\n",
    ),
    // --- demo/legacy: a kfctl-era package in API versions Kubernetes no longer serves (shapes
    // of Kubeflow 0.7–1.2: a v1beta1 CRD with `validation`, CRD-wide printer columns and typeless
    // schema nodes; v1beta1 RBAC; a v1beta1 webhook without sideEffects or failurePolicy; an
    // extensions/v1beta1 Deployment without a selector; ...). No APIService: one without a
    // backend would break the cluster's discovery for everyone else.
    (
        "demo/legacy/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- crd.yaml\n- rbac.yaml\n- workloads.yaml\n- policies.yaml\n- webhook.yaml\n- legacy-job.yaml\n",
    ),
    (
        "demo/legacy/crd.yaml",
        r#"apiVersion: apiextensions.k8s.io/v1beta1
kind: CustomResourceDefinition
metadata:
  name: legacyjobs.demo.kubeflow.org
spec:
  group: demo.kubeflow.org
  version: v1alpha1
  scope: Namespaced
  names:
    kind: LegacyJob
    plural: legacyjobs
    singular: legacyjob
  subresources:
    status: {}
  additionalPrinterColumns:
  - name: Owner
    type: string
    JSONPath: .spec.owner
  validation:
    openAPIV3Schema:
      properties:
        spec:
          properties:
            owner:
              type: string
            replicas:
              type: integer
              minimum: 1
            template: {}
"#,
    ),
    (
        "demo/legacy/legacy-job.yaml",
        "apiVersion: demo.kubeflow.org/v1alpha1\nkind: LegacyJob\nmetadata:\n  name: nightly\nspec:\n  owner: admin@example.com\n  replicas: 2\n  template: {image: trainer:v1, args: [--epochs, \"3\"]}\n  schedule: 0 3 * * *\n",
    ),
    (
        "demo/legacy/rbac.yaml",
        r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: legacy-controller
---
apiVersion: rbac.authorization.k8s.io/v1beta1
kind: ClusterRole
metadata:
  name: legacy-job-viewer
rules:
- apiGroups: [demo.kubeflow.org]
  resources: [legacyjobs]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1beta1
kind: Role
metadata:
  name: legacy-controller
rules:
- apiGroups: [demo.kubeflow.org]
  resources: [legacyjobs, legacyjobs/status]
  verbs: [get, list, watch, update]
---
apiVersion: rbac.authorization.k8s.io/v1beta1
kind: RoleBinding
metadata:
  name: legacy-controller
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: legacy-controller
subjects:
- kind: ServiceAccount
  name: legacy-controller
"#,
    ),
    (
        "demo/legacy/workloads.yaml",
        r#"apiVersion: v1
kind: Service
metadata:
  name: legacy-controller
spec:
  selector: {app: legacy-controller}
  ports:
  - port: 443
    targetPort: 8443
---
apiVersion: extensions/v1beta1
kind: Deployment
metadata:
  name: legacy-controller
spec:
  replicas: 1
  template:
    metadata:
      labels: {app: legacy-controller}
    spec:
      serviceAccountName: legacy-controller
      containers:
      - name: manager
        image: gcr.io/kubeflow-images-public/legacy-controller:v0.7.0
---
apiVersion: v1
kind: Service
metadata:
  name: legacy-db
spec:
  clusterIP: None
  selector: {app: legacy-db}
  ports:
  - port: 3306
---
apiVersion: apps/v1beta2
kind: StatefulSet
metadata:
  name: legacy-db
spec:
  serviceName: legacy-db
  replicas: 1
  selector:
    matchLabels: {app: legacy-db}
  template:
    metadata:
      labels: {app: legacy-db}
    spec:
      containers:
      - name: mysql
        image: mysql:5.6
---
apiVersion: batch/v1beta1
kind: CronJob
metadata:
  name: legacy-cleanup
spec:
  schedule: "0 4 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: cleanup
            image: gcr.io/kubeflow-images-public/legacy-cleanup:v0.7.0
---
apiVersion: autoscaling/v2beta1
kind: HorizontalPodAutoscaler
metadata:
  name: legacy-controller
spec:
  minReplicas: 1
  maxReplicas: 3
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: legacy-controller
  metrics:
  - type: Resource
    resource:
      name: cpu
      targetAverageUtilization: 80
"#,
    ),
    (
        "demo/legacy/policies.yaml",
        r#"apiVersion: scheduling.k8s.io/v1beta1
kind: PriorityClass
metadata:
  name: legacy-critical
value: 1000000
description: kfctl-era priority class
---
apiVersion: policy/v1beta1
kind: PodDisruptionBudget
metadata:
  name: legacy-controller
spec:
  minAvailable: 1
  selector:
    matchLabels: {app: legacy-controller}
---
apiVersion: extensions/v1beta1
kind: Ingress
metadata:
  name: legacy-controller
spec:
  rules:
  - http:
      paths:
      - path: /legacy
        backend:
          serviceName: legacy-controller
          servicePort: 443
"#,
    ),
    (
        "demo/legacy/webhook.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1beta1
kind: ValidatingWebhookConfiguration
metadata:
  name: legacy-job-validator
webhooks:
- name: legacyjobs.demo.kubeflow.org
  clientConfig:
    service:
      name: legacy-controller
      namespace: kubeflow
      path: /validate
  rules:
  - apiGroups: [demo.kubeflow.org]
    apiVersions: [v1alpha1]
    operations: [DELETE]
    resources: [legacyjobs]
"#,
    ),
    // --- v1.2 stacks layout
    (
        "namespaces/base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- namespace.yaml\n",
    ),
    (
        "namespaces/base/namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kubeflow\n",
    ),
    (
        "stacks/kubernetes/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: kubeflow\nresources:\n- application/web-app\n- application/webhook\ncommonLabels:\n  app.kubernetes.io/part-of: kubeflow\n",
    ),
    (
        "stacks/kubernetes/application/web-app/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nbases:\n- ../../../../demo/web-app/base\nconfigMapGenerator:\n- name: web-app-parameters\n  behavior: merge\n  env: params.env\n",
    ),
    (
        "stacks/kubernetes/application/web-app/params.env",
        "userid-header=kubeflow-userid\n",
    ),
    (
        "stacks/kubernetes/application/webhook/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../../../demo/webhook\n",
    ),
    (
        "stacks/legacy/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: kubeflow\nresources:\n- application/legacy\ncommonLabels:\n  app.kubernetes.io/part-of: kubeflow\n",
    ),
    (
        "stacks/legacy/application/legacy/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../../../demo/legacy\n",
    ),
];

/// Writes the fixture repository into `dir`.
pub fn write_repo(dir: &Path) {
    write_files(dir, FILES);
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
}

/// Top folder of the modern fixture tarball.
pub const MODERN_TOP_FOLDER: &str = "manifests-1.11.0";

/// A repository shaped like kubeflow/manifests since 1.7 (kustomize v5 only):
/// - `apps/web/upstream/overlays/istio`: a base with `labels`, a Component (`kind: Component`
///   with a targeted JSON patch) from `common/`, `replacements`, `sortOptions`;
/// - `common/certs/base`: cert-manager's shape — a CRD, a webhook Deployment behind a Service, a
///   ValidatingWebhookConfiguration admitting the CRD's Issuers, and an Issuer — in namespace
///   `demo-certs`. Its webhook fails open with a 1 s timeout: the local environment's pods do not
///   serve, and what is checked is only when the Issuer is written.
/// - `common/mesh/…`: Istio's shape — CRDs (Gateway, PeerAuthentication), a control plane in
///   `demo-mesh` whose mutating webhook admits both kinds (failing open, as above), and a
///   Component adding a PeerAuthentication; `common/kubeflow-gateway/base`: a Gateway in
///   `kubeflow`, which `common/kubeflow-namespace/base` makes.
/// - `example/kustomization.yaml`: all of it as one kustomization, as upstream installs it
///   (`resources` and `components`, `sortOptions: legacy`); [`MODERN_EXAMPLE_APPLICATIONS`] lists
///   its entries.
const MODERN_FILES: &[(&str, &str)] = &[
    (
        "apps/web/upstream/base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [deployment.yaml, config.yaml]\n\
         labels:\n- pairs: {app.kubernetes.io/part-of: web}\n  includeSelectors: false\n",
    ),
    (
        "apps/web/upstream/base/deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n\
         \x20 template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: placeholder}]}\n",
    ),
    ("apps/web/upstream/base/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-config}\ndata: {image: ghcr.io/kubeflow/web:v1.11.0}\n"),
    (
        "common/mesh/components/sidecar/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n\
         - target: {kind: Deployment}\n  patch: |-\n    - op: add\n      path: /spec/template/metadata/annotations\n      value: {sidecar.istio.io/inject: \"true\"}\n",
    ),
    (
        "apps/web/upstream/overlays/istio/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: kubeflow\nresources: [../../base]\n\
         components: [../../../../../common/mesh/components/sidecar]\nsortOptions: {order: fifo}\nreplacements:\n\
         - source: {kind: ConfigMap, name: web-config, fieldPath: data.image}\n  targets:\n  - select: {kind: Deployment, name: web}\n    fieldPaths: [\"spec.template.spec.containers.[name=web].image\"]\n",
    ),
    (
        "common/certs/base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: demo-certs\n\
         resources: [namespace.yaml, crd.yaml, webhook.yaml, issuer.yaml, service.yaml, deployment.yaml]\n\
         labels:\n- pairs: {app.kubernetes.io/part-of: demo-certs}\n",
    ),
    ("common/certs/base/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo-certs}\n"),
    (
        "common/certs/base/crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: issuers.demo.kubeflow.org}\nspec:\n\
         \x20 group: demo.kubeflow.org\n  names: {kind: Issuer, plural: issuers, singular: issuer, listKind: IssuerList}\n  scope: Namespaced\n\
         \x20 versions:\n  - name: v1\n    served: true\n    storage: true\n\
         \x20   schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
    ),
    (
        "common/certs/base/deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: certs-webhook}\nspec:\n  selector: {matchLabels: {app: certs-webhook}}\n\
         \x20 template:\n    metadata: {labels: {app: certs-webhook}}\n    spec: {containers: [{name: webhook, image: ghcr.io/example/certs-webhook:v1.0.0}]}\n",
    ),
    (
        "common/certs/base/service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: certs-webhook}\nspec:\n  selector: {app: certs-webhook}\n  ports: [{port: 443, targetPort: 10250}]\n",
    ),
    (
        "common/certs/base/webhook.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: demo-certs-validator}\nwebhooks:\n\
         - name: issuers.demo.kubeflow.org\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Ignore\n  timeoutSeconds: 1\n\
         \x20 clientConfig: {service: {name: certs-webhook, namespace: demo-certs, path: /validate}}\n\
         \x20 rules: [{apiGroups: [demo.kubeflow.org], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [issuers]}]\n",
    ),
    ("common/certs/base/issuer.yaml", "apiVersion: demo.kubeflow.org/v1\nkind: Issuer\nmetadata: {name: selfsigned}\nspec: {selfSigned: {}}\n"),
    (
        "common/mesh/crds/base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [crds.yaml]\nlabels:\n- pairs: {app.kubernetes.io/part-of: demo-mesh}\n",
    ),
    (
        "common/mesh/crds/base/crds.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: gateways.demo.kubeflow.org}\nspec:\n\
         \x20 group: demo.kubeflow.org\n  names: {kind: Gateway, plural: gateways, singular: gateway, listKind: GatewayList}\n  scope: Namespaced\n\
         \x20 versions:\n  - name: v1\n    served: true\n    storage: true\n\
         \x20   schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n---\n\
         apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: peerauthentications.demo.kubeflow.org}\nspec:\n\
         \x20 group: demo.kubeflow.org\n  names: {kind: PeerAuthentication, plural: peerauthentications, singular: peerauthentication, listKind: PeerAuthenticationList}\n\
         \x20 scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n\
         \x20   schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
    ),
    (
        "common/mesh/install/base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: demo-mesh\n\
         resources: [namespace.yaml, webhook.yaml, service.yaml, deployment.yaml]\nlabels:\n- pairs: {app.kubernetes.io/part-of: demo-mesh}\n",
    ),
    ("common/mesh/install/base/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo-mesh}\n"),
    (
        "common/mesh/install/base/deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: mesh-control}\nspec:\n  selector: {matchLabels: {app: mesh-control}}\n\
         \x20 template:\n    metadata: {labels: {app: mesh-control}}\n    spec: {containers: [{name: discovery, image: ghcr.io/example/mesh-control:v1.28.0}]}\n",
    ),
    (
        "common/mesh/install/base/service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: mesh-control}\nspec:\n  selector: {app: mesh-control}\n  ports: [{port: 443, targetPort: 15017}]\n",
    ),
    (
        "common/mesh/install/base/webhook.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: demo-mesh-defaulter}\nwebhooks:\n\
         - name: defaults.mesh.demo.kubeflow.org\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Ignore\n  timeoutSeconds: 1\n\
         \x20 clientConfig: {service: {name: mesh-control, namespace: demo-mesh, path: /inject}}\n\
         \x20 rules: [{apiGroups: [demo.kubeflow.org], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [gateways, peerauthentications]}]\n",
    ),
    (
        "common/mesh/components/strict-mtls/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [peer-authentication.yaml]\n",
    ),
    (
        "common/mesh/components/strict-mtls/peer-authentication.yaml",
        "apiVersion: demo.kubeflow.org/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: demo-mesh}\nspec: {mtls: {mode: STRICT}}\n",
    ),
    ("common/kubeflow-namespace/base/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [namespace.yaml]\n"),
    ("common/kubeflow-namespace/base/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: kubeflow}\n"),
    (
        "common/kubeflow-gateway/base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: kubeflow\nresources: [gateway.yaml]\n\
         labels:\n- pairs: {app.kubernetes.io/part-of: kubeflow}\n",
    ),
    (
        "common/kubeflow-gateway/base/gateway.yaml",
        "apiVersion: demo.kubeflow.org/v1\nkind: Gateway\nmetadata: {name: kubeflow-gateway}\nspec:\n  selector: {app: mesh-ingressgateway}\n\
         \x20 servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"*\"]}]\n",
    ),
    (
        "example/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nsortOptions:\n  order: legacy\n\
         \x20 legacySortOptions:\n    orderFirst: [Namespace, CustomResourceDefinition, ServiceAccount, Service, Deployment]\n\
         \x20   orderLast: [MutatingWebhookConfiguration, ValidatingWebhookConfiguration]\nresources:\n\
         - ../common/certs/base\n- ../common/mesh/crds/base\n- ../common/mesh/install/base\n- ../common/kubeflow-namespace/base\n\
         - ../common/kubeflow-gateway/base\n- ../apps/web/upstream/overlays/istio\ncomponents:\n- ../common/mesh/components/strict-mtls\n",
    ),
];

/// The entries of the modern fixture's `example/kustomization.yaml` (`resources`, then
/// `components`) as KfDef applications: (application name, path in the repository). The
/// Component ([`MODERN_EXAMPLE_COMPONENT`]) is applied to the mesh's install (`componentOf`). The mesh's
/// are not named `istio-crds`/`istio-install`: at a Kubeflow version the built-in Istio ships,
/// applications named like its own are installed from its release, not from the package.
pub const MODERN_EXAMPLE_APPLICATIONS: &[(&str, &str)] = &[
    ("cert-manager", "common/certs/base"),
    ("mesh-crds", "common/mesh/crds/base"),
    ("mesh-install", "common/mesh/install/base"),
    ("kubeflow-namespace", "common/kubeflow-namespace/base"),
    ("kubeflow-istio-resources", "common/kubeflow-gateway/base"),
    ("web", "apps/web/upstream/overlays/istio"),
    ("strict-mtls", "common/mesh/components/strict-mtls"),
];

/// The modern example's Component and the application the KfDef applies it to (`componentOf`).
pub const MODERN_EXAMPLE_COMPONENT: (&str, &str) = ("strict-mtls", "mesh-install");

/// Writes the modern fixture repository ([`MODERN_FILES`]) into `dir`.
pub fn write_modern_repo(dir: &Path) {
    write_files(dir, MODERN_FILES);
}

/// Where the real kubeflow/manifests releases and their KfDefs are (`manifests-1.10.2.tar.gz`,
/// `kfdef-1.10.2.yaml`, …): `$KFOP_UPSTREAM_MANIFESTS`, else `shared/manifests` beside the
/// checkout, else the machine's `/work/shared/manifests`.
pub fn upstream_releases() -> std::path::PathBuf {
    let candidates = [
        std::env::var_os("KFOP_UPSTREAM_MANIFESTS").map(std::path::PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/manifests")),
        Some(std::path::PathBuf::from("/work/shared/manifests")),
    ];
    candidates.into_iter().flatten().find(|d| d.join("manifests-1.10.2.tar.gz").is_file()).unwrap_or_else(|| {
        panic!("these tests use the real kubeflow/manifests releases: set KFOP_UPSTREAM_MANIFESTS to the folder holding manifests-1.10.2.tar.gz")
    })
}

/// The remote bases Kubeflow 1.11 names, as kubeflow/manifests' kustomizations name them: the
/// repository (or release asset) on github.com, the ref, and the file in `remote/` of
/// [`upstream_releases`] holding it.
const UPSTREAM_REMOTE_BASES: [(&str, &str, &str); 3] = [
    ("https://github.com/argoproj/argo-workflows/", "?ref=v3.7.3", "argo-workflows-3.7.3.tar.gz"),
    ("https://github.com/kubernetes-sigs/lws//", "?ref=v0.7.0", "lws-0.7.0.tar.gz"),
    ("https://github.com/kubernetes-sigs/jobset/releases/download/v0.10.1/manifests.yaml", "", "jobset-v0.10.1-manifests.yaml"),
];

/// The remote bases Kubeflow 1.11 names, each at the path github.com serves it (an archive per
/// repository and ref, a release asset as itself): serve them under a prefix and map
/// `https://github.com/` to it.
pub fn upstream_remote_bases() -> BTreeMap<String, Vec<u8>> {
    let remote = upstream_releases().join("remote");
    let file = |name: &str| std::fs::read(remote.join(name)).unwrap_or_else(|e| panic!("{}: {e}", remote.join(name).display()));
    UPSTREAM_REMOTE_BASES
        .iter()
        .map(|(url, reference, name)| {
            let path = url.trim_start_matches("https://github.com/").trim_end_matches('/');
            let served = match reference.strip_prefix("?ref=") {
                Some(tag) => format!("{path}/archive/{tag}.tar.gz"),
                None => path.to_string(),
            };
            (served, file(name))
        })
        .collect()
}

/// The kubeflow/manifests releases kept here, by tag, and their archives in [`upstream_releases`].
pub const UPSTREAM_RELEASE_ARCHIVES: [(&str, &str); 4] =
    [("v1.2.0", "manifests-1.2.0.tar.gz"), ("v1.3.1", "manifests-1.3.1.tar.gz"), ("v1.10.2", "manifests-1.10.2.tar.gz"), ("v1.11.0", "manifests-1.11.0.tar.gz")];

/// What github.com serves of Kubeflow here: every release archive kept here at its path on
/// github.com (`kubeflow/manifests/archive/<tag>.tar.gz`) and the remote bases 1.11 names
/// ([`upstream_remote_bases`]). Served under a prefix, with `https://github.com/` mapped to it, it
/// is an air-gapped cluster's mirror of github.com.
pub fn upstream_github() -> BTreeMap<String, Vec<u8>> {
    let dir = upstream_releases();
    let mut files = upstream_remote_bases();
    for (tag, archive) in UPSTREAM_RELEASE_ARCHIVES {
        let path = crate::example::upstream_archive(tag).trim_start_matches("https://github.com/").to_string();
        files.insert(path, std::fs::read(dir.join(archive)).unwrap_or_else(|e| panic!("{archive}: {e}")));
    }
    files
}

/// [`upstream_remote_bases`] under `gh/`: map `https://github.com/` to [`Server::url`]`("gh/")`.
pub async fn upstream_remote_bases_mirror() -> Server {
    Server::start(upstream_remote_bases().into_iter().map(|(path, bytes)| (format!("gh/{path}"), bytes)).collect()).await
}

/// A copy, in `dir`, of the unpacked release at `root` whose kustomizations name the copies of
/// `remote/` (unpacked into its `.remote/`) where they name a remote base of
/// [`UPSTREAM_REMOTE_BASES`]: what upstream's own `kustomize build` reads once kustomize has
/// fetched them, built offline. The copy's root, and how many kustomizations were edited.
pub fn with_upstream_remote_bases_local(root: &Path, dir: &Path) -> (std::path::PathBuf, usize) {
    let copy = dir.join(root.file_name().expect("a release folder"));
    let run = |command: &mut std::process::Command| assert!(command.status().unwrap().success(), "{command:?}");
    run(std::process::Command::new("cp").arg("-r").arg(root).arg(&copy));
    let (remote, local) = (upstream_releases().join("remote"), copy.join(".remote"));
    std::fs::create_dir_all(&local).unwrap();
    let mut edited = 0;
    for entry in walkdir::WalkDir::new(&copy).into_iter().map(Result::unwrap).filter(|e| e.file_name() == "kustomization.yaml") {
        let file = entry.path();
        let text = std::fs::read_to_string(file).unwrap();
        // kustomize takes no absolute path: the copy named from the kustomization's folder.
        let depth = file.parent().unwrap().strip_prefix(&copy).unwrap().components().count();
        let up = "../".repeat(depth);
        let mut out = text.clone();
        for (url, reference, name) in UPSTREAM_REMOTE_BASES {
            let unpacked = name.strip_suffix(".tar.gz");
            if unpacked.is_some() && !local.join(unpacked.unwrap()).exists() && text.contains(url) {
                run(std::process::Command::new("tar").arg("-xzf").arg(remote.join(name)).arg("-C").arg(&local));
            }
            out = match unpacked {
                // `<url><path><reference>` → `<up>.remote/<folder>/<path>`
                Some(folder) => replace_between(&out, url, reference, &format!("{up}.remote/{folder}/")),
                None if out.contains(url) => {
                    std::fs::copy(remote.join(name), local.join(name)).unwrap();
                    out.replace(url, &format!("{up}.remote/{name}"))
                }
                None => out,
            };
        }
        if out != text {
            std::fs::write(file, out).unwrap();
            edited += 1;
        }
    }
    (copy, edited)
}

/// `text` with every `<start><path><end>` (a path without white space) replaced by
/// `<replacement><path>`.
fn replace_between(text: &str, start: &str, end: &str, replacement: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(start) {
        let after = &rest[at + start.len()..];
        let path_len = after.find(|c: char| c.is_whitespace()).unwrap_or(after.len());
        let Some(path) = after[..path_len].strip_suffix(end) else {
            out.push_str(&rest[..at + start.len()]);
            rest = after;
            continue;
        };
        out.push_str(&rest[..at]);
        out.push_str(replacement);
        out.push_str(path);
        rest = &after[path_len..];
    }
    out.push_str(rest);
    out
}

/// The modern fixture repository as a GitHub-style tarball.
pub fn modern_repo_tarball() -> Vec<u8> {
    edited_modern_repo_tarball(&[])
}

/// The modern fixture repository with `edits` (as [`edited_repo_tarball`]; an empty text to
/// replace writes a new file), as a GitHub-style tarball.
pub fn edited_modern_repo_tarball(edits: &[(&str, &str, &str)]) -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    write_modern_repo(tmp.path());
    edit(tmp.path(), edits);
    pack_github_tarball(tmp.path(), MODERN_TOP_FOLDER)
}

/// Applies `edits` (path, text, replacement) to the tree at `dir`: the first occurrence of the
/// text is replaced; an empty text makes the file with the replacement as its content.
fn edit(dir: &Path, edits: &[(&str, &str, &str)]) {
    for (path, from, to) in edits {
        let file = dir.join(path);
        if from.is_empty() {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, to).unwrap();
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(text.contains(from), "{path} has no {from:?}");
        std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
    }
}

/// Edits making the modern fixture Kubeflow-1.10-shaped: older images (the web app's, through
/// its ConfigMap and replacement; the mesh's control plane), and Pipelines' MinIO object store —
/// a Deployment and the PersistentVolumeClaim holding its data — in the web app's package.
pub const MODERN_1_10_EDITS: &[(&str, &str, &str)] = &[
    ("apps/web/upstream/base/config.yaml", "ghcr.io/kubeflow/web:v1.11.0", "ghcr.io/kubeflow/web:v1.10.0"),
    ("common/mesh/install/base/deployment.yaml", "mesh-control:v1.28.0", "mesh-control:v1.24.3"),
    ("apps/web/upstream/base/kustomization.yaml", "resources: [deployment.yaml, config.yaml]", "resources: [deployment.yaml, config.yaml, minio.yaml]"),
    (
        "apps/web/upstream/base/minio.yaml",
        "",
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: minio-pvc}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: minio}\nspec:\n  selector: {matchLabels: {app: minio}}\n\
         \x20 template:\n    metadata: {labels: {app: minio}}\n    spec: {containers: [{name: minio, image: minio/minio:RELEASE.2019-08-14T20-37-41Z}]}\n",
    ),
];

/// Edits making the modern fixture Kubeflow-1.11-shaped where 1.10 differs: SeaweedFS in MinIO's
/// place (MinIO's claim is no longer rendered), and the Gateway CRD serving a second version.
pub const MODERN_1_11_EDITS: &[(&str, &str, &str)] = &[
    ("apps/web/upstream/base/kustomization.yaml", "resources: [deployment.yaml, config.yaml]", "resources: [deployment.yaml, config.yaml, seaweedfs.yaml]"),
    (
        "apps/web/upstream/base/seaweedfs.yaml",
        "",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: seaweedfs}\nspec:\n  selector: {matchLabels: {app: seaweedfs}}\n\
         \x20 template:\n    metadata: {labels: {app: seaweedfs}}\n    spec: {containers: [{name: seaweedfs, image: chrislusf/seaweedfs:3.85}]}\n",
    ),
    (
        "common/mesh/crds/base/crds.yaml",
        "  versions:\n  - name: v1\n",
        "  versions:\n  - name: v1beta1\n    served: true\n    storage: false\n\
         \x20   schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n  - name: v1\n",
    ),
];

/// Packs `dir` as a GitHub archive: a gzip tar whose entries all sit under `top/`, behind a pax
/// global header as GitHub writes one.
pub fn pack_github_tarball(dir: &Path, top: &str) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    // Fixed mtimes and owners: two packings of the same tree are the same bytes (tests compare
    // digests of separately packed archives).
    b.mode(tar::HeaderMode::Deterministic);
    let mut pax = tar::Header::new_ustar();
    pax.set_entry_type(tar::EntryType::XGlobalHeader);
    let comment = b"52 comment=0123456789abcdef0123456789abcdef01234567\n";
    pax.set_size(comment.len() as u64);
    pax.set_path("pax_global_header").unwrap();
    pax.set_cksum();
    b.append(&pax, &comment[..]).unwrap();
    b.append_dir_all(top, dir).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

/// The fixture repository as a GitHub-style tarball.
pub fn repo_tarball() -> Vec<u8> {
    edited_repo_tarball(&[])
}

/// The fixture repository with `edits` (path → text replacing the first occurrence of a text;
/// an empty replacement of a whole line removes it), as a GitHub-style tarball: a later
/// version of the same repository.
pub fn edited_repo_tarball(edits: &[(&str, &str, &str)]) -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    write_repo(tmp.path());
    edit(tmp.path(), edits);
    pack_github_tarball(tmp.path(), TOP_FOLDER)
}

/// A stand-in for a KfDef's manifests repository, where the real one cannot be downloaded (tests,
/// `make demo` without network): one small package at each application's `repoRef.path` that
/// renders a ConfigMap of its parameters and a Deployment, shaped for the KfDef's mode — kfctl
/// v1.0's `base/` + `overlays/<name>/` + `params.env` declaring every parameter the KfDef gives,
/// or a plain package for a stacks KfDef (one with an application named `kubeflow-apps`). Objects
/// are named after the first application with that path. Returned as a GitHub-style tarball.
pub fn stand_in_repo(kfdef: &KfDef) -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let stacks = kfdef.spec.applications.iter().any(|a| a.name == "kubeflow-apps");
    let mut written = std::collections::BTreeSet::new();
    for app in &kfdef.spec.applications {
        let Some(config) = &app.kustomize_config else { continue };
        let Some(path) = config.repo_ref.as_ref().map(|r| r.path.trim_matches('/')).filter(|p| !p.is_empty()) else { continue };
        let name = &app.name;
        let write = |rel: &str, content: String| {
            let file = tmp.path().join(path).join(rel);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        };
        let deployment = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: {name}\n        image: registry.example.com/kubeflow-stand-in/{name}:v1\n"
        );
        let params: String = config.parameters.iter().map(|p| format!("{}={}\n", p.name, p.value)).collect();
        let generator = format!("configMapGenerator:\n- name: {name}-parameters\n  env: params.env\ngeneratorOptions:\n  disableNameSuffixHash: true\n");
        if !written.insert(path.to_string()) {
            continue;
        }
        if stacks {
            write("kustomization.yaml", format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- deployment.yaml\n{generator}"));
            write("params.env", params);
        } else {
            write("base/kustomization.yaml", format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncommonLabels:\n  app.kubernetes.io/name: {name}\nresources:\n- deployment.yaml\n{generator}"));
            write("base/params.env", params);
            for overlay in &config.overlays {
                write(&format!("overlays/{overlay}/kustomization.yaml"), format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nbases:\n- ../../base\ncommonLabels:\n  overlay.kubeflow.org/{overlay}: \"true\"\n"));
            }
        }
        write(if stacks { "deployment.yaml" } else { "base/deployment.yaml" }, deployment);
    }
    pack_github_tarball(tmp.path(), TOP_FOLDER)
}

/// A hostile archive entry.
#[derive(Clone, Copy, Debug)]
pub enum Hostile {
    /// `top/../../escaped.txt`
    ParentDir,
    /// `/tmp/escaped.txt`
    Absolute,
    /// `top/link -> ../../..`
    SymlinkOut,
    /// `top/hard` hard link to `../outside`
    HardlinkOut,
}

/// A tarball with one normal file and one hostile entry (raw header bytes: the `tar` crate
/// refuses to write these paths itself).
pub fn hostile_tarball(kind: Hostile) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let mut ok = tar::Header::new_gnu();
    ok.set_path("top/kustomization.yaml").unwrap();
    ok.set_size(0);
    ok.set_mode(0o644);
    ok.set_cksum();
    b.append(&ok, &[][..]).unwrap();
    let mut h = tar::Header::new_old();
    let (name, link, kind, data): (&[u8], &[u8], _, &[u8]) = match kind {
        Hostile::ParentDir => (b"top/../../escaped.txt", b"", tar::EntryType::Regular, b"x"),
        Hostile::Absolute => (b"/tmp/escaped.txt", b"", tar::EntryType::Regular, b"x"),
        Hostile::SymlinkOut => (b"top/link", b"../../..", tar::EntryType::Symlink, b""),
        Hostile::HardlinkOut => (b"top/hard", b"../outside", tar::EntryType::Link, b""),
    };
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name);
        old.linkname[..link.len()].copy_from_slice(link);
    }
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append(&h, data).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

/// A v1.0-style KfDef over the fixture repository at `uri`.
pub fn per_application_kfdef(uri: &str, namespace: &str) -> KfDef {
    serde_yaml_ng::from_str(&format!(
        r#"apiVersion: kfdef.apps.kubeflow.org/v1
kind: KfDef
metadata:
  name: demo
  namespace: {namespace}
spec:
  version: v1.0.2
  applications:
  - name: webhook
    kustomizeConfig:
      repoRef: {{name: manifests, path: demo/webhook}}
  - name: web-app
    kustomizeConfig:
      overlays: [application, istio]
      parameters:
      - {{name: userid-header, value: kubeflow-userid}}
      - {{name: gateway, value: istio-system/ingressgateway}}
      repoRef: {{name: manifests, path: demo/web-app}}
  repos:
  - name: manifests
    uri: {uri}
"#
    ))
    .unwrap()
}

/// A KfDef named `kubeflow` in `namespace` whose applications are the entries of the modern
/// fixture's `example/kustomization.yaml` ([`MODERN_EXAMPLE_APPLICATIONS`]), from the repository
/// at `uri`, as Kubeflow v1.11.0.
pub fn modern_example_kfdef(uri: &str, namespace: &str) -> KfDef {
    let applications: Vec<serde_json::Value> = MODERN_EXAMPLE_APPLICATIONS
        .iter()
        .map(|(name, path)| {
            let mut config = serde_json::json!({"repoRef": {"name": "manifests", "path": path}});
            if *name == MODERN_EXAMPLE_COMPONENT.0 {
                config["componentOf"] = serde_json::json!(MODERN_EXAMPLE_COMPONENT.1);
            }
            serde_json::json!({"name": name, "kustomizeConfig": config})
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
        "metadata": {"name": "kubeflow", "namespace": namespace},
        "spec": {"version": "v1.11.0", "applications": applications, "repos": [{"name": "manifests", "uri": uri}]},
    }))
    .unwrap()
}

/// A v1.2-style (stacks) KfDef over the fixture repository at `uri`.
pub fn stacks_kfdef(uri: &str) -> KfDef {
    serde_yaml_ng::from_str(&format!(
        r#"apiVersion: kfdef.apps.kubeflow.org/v1
kind: KfDef
metadata:
  name: demo
  namespace: kubeflow
spec:
  version: v1.2.0
  applications:
  - name: namespaces
    kustomizeConfig:
      repoRef: {{name: manifests, path: namespaces/base}}
  - name: kubeflow-apps
    kustomizeConfig:
      repoRef: {{name: manifests, path: stacks/kubernetes}}
  repos:
  - name: manifests
    uri: {uri}
"#
    ))
    .unwrap()
}

/// A kfctl-era KfDef over the fixture repository at `uri` whose application renders API versions
/// Kubernetes no longer serves (`demo/legacy`): one application `legacy` (v1.0 style, into
/// `namespace`), or with `stacks` the v1.2 style, `namespaces` and `kubeflow-apps` (into
/// `kubeflow`).
pub fn legacy_kfdef(uri: &str, namespace: &str, stacks: bool) -> KfDef {
    let applications = if stacks {
        "  - name: namespaces\n    kustomizeConfig:\n      repoRef: {name: manifests, path: namespaces/base}\n  - name: kubeflow-apps\n    kustomizeConfig:\n      repoRef: {name: manifests, path: stacks/legacy}\n"
    } else {
        "  - name: legacy\n    kustomizeConfig:\n      repoRef: {name: manifests, path: demo/legacy}\n"
    };
    let version = if stacks { "v1.2.0" } else { "v1.0.2" };
    serde_yaml_ng::from_str(&format!(
        "apiVersion: kfdef.apps.kubeflow.org/v1\nkind: KfDef\nmetadata:\n  name: legacy\n  namespace: {namespace}\nspec:\n  version: {version}\n  applications:\n{applications}  repos:\n  - name: manifests\n    uri: {uri}\n"
    ))
    .unwrap()
}

/// A loopback HTTP server answering `GET /<name>` with the bytes registered under `name` and
/// 404 otherwise. Stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Serves `files` on 127.0.0.1 (an ephemeral port).
    pub async fn start(files: BTreeMap<String, Vec<u8>>) -> Server {
        Self::start_on("127.0.0.1:0".parse().unwrap(), files).await
    }

    /// Serves `files` on `addr`.
    pub async fn start_on(addr: SocketAddr, files: BTreeMap<String, Vec<u8>>) -> Server {
        let files = Arc::new(files);
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let files = files.clone();
            async move {
                match files.get(uri.path().trim_start_matches('/')) {
                    Some(body) => (axum::http::StatusCode::OK, body.clone()),
                    None => (axum::http::StatusCode::NOT_FOUND, Vec::new()),
                }
            }
        });
        Self::serve(addr, app).await
    }

    /// A loopback git server: git's own smart HTTP server (`git http-backend`, run as CGI per
    /// request) serving the repositories under `root` at `/<path below root>`.
    pub async fn git(root: &Path) -> Server {
        let root = Arc::new(root.to_path_buf());
        let app = axum::Router::new().fallback(move |method: axum::http::Method, uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let root = root.clone();
            async move { http_backend(&root, method, uri, headers, body).await }
        });
        Self::serve("127.0.0.1:0".parse().unwrap(), app).await
    }

    async fn serve(addr: SocketAddr, app: axum::Router) -> Server {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap_or_else(|e| panic!("listen on {addr}: {e}"));
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Server { addr, task }
    }

    /// `http://127.0.0.1:<port>/<name>`.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request through `git http-backend`: CGI variables in, `Status`/headers/body out.
async fn http_backend(root: &Path, method: axum::http::Method, uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes) -> axum::response::Response {
    use tokio::io::AsyncWriteExt;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or_default())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_ADDR", "127.0.0.1")
        // Wanting a commit by its id, as a remote base pinned to one does.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "uploadpack.allowAnySHA1InWant")
        .env("GIT_CONFIG_VALUE_0", "true")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git http-backend runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&body).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let split = output.stdout.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4)).or_else(|| output.stdout.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (head, content) = match split {
        Some((at, gap)) => (String::from_utf8_lossy(&output.stdout[..at]).into_owned(), output.stdout[at + gap..].to_vec()),
        None => (String::new(), output.stdout),
    };
    let mut response = axum::response::Response::builder().status(200);
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            response = response.status(value.split(' ').next().and_then(|c| c.parse::<u16>().ok()).unwrap_or(500));
        } else {
            response = response.header(name, value);
        }
    }
    response.body(axum::body::Body::from(content)).unwrap()
}

/// Runs `git` in `dir` (an identity given, no user configuration read) and returns its output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=fixture", "-c", "user.email=fixture@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}
