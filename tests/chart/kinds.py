"""Shapes of the Kubernetes kinds the Runway chart renders, as JSON Schemas.

Not the full OpenAPI of Kubernetes: every kind the chart uses, with its required fields and the
field names of the objects the chart writes, closed (`additionalProperties: false`) wherever the
chart writes the object itself so that a misspelt field fails the check the way
`kubectl apply --validate=strict` would. Objects copied verbatim from values (affinity,
tolerations, NetworkPolicy peers) are only checked to be objects.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
NAME: Schema = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}
LABEL_NAME: Schema = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
INT: Schema = {"type": "integer"}
BOOL: Schema = {"type": "boolean"}
OBJECT: Schema = {"type": "object"}
STRING_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
INT_OR_STRING: Schema = {"type": ["integer", "string"]}
PORT_NUMBER: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}


def closed(props: Schema, required: list[str] | None = None) -> Schema:
    """An object with exactly these fields (some required)."""
    s: Schema = {"type": "object", "additionalProperties": False, "properties": props}
    if required:
        s["required"] = required
    return s


def array(items: Schema, min_items: int = 0) -> Schema:
    s: Schema = {"type": "array", "items": items}
    if min_items:
        s["minItems"] = min_items
    return s


def strings(values: list[str] | None = None) -> Schema:
    return array({"type": "string", "enum": values} if values else STRING)


def metadata(namespaced: bool) -> Schema:
    """ObjectMeta as the chart writes it: a name, labels, annotations; a namespace when namespaced."""
    s = closed(
        {
            "name": NAME,
            "namespace": LABEL_NAME,
            "labels": STRING_MAP,
            "annotations": STRING_MAP,
        },
        ["name", "namespace"] if namespaced else ["name"],
    )
    if not namespaced:
        s["not"] = {"required": ["namespace"]}
    return s


LABEL_SELECTOR = closed({"matchLabels": STRING_MAP, "matchExpressions": array(OBJECT)})
SECCOMP = closed({"type": {"enum": ["RuntimeDefault", "Localhost", "Unconfined"]}, "localhostProfile": STRING}, ["type"])
CAPABILITIES = closed({"add": strings(), "drop": strings()})

SECURITY_CONTEXT = closed(
    {
        "allowPrivilegeEscalation": BOOL,
        "appArmorProfile": OBJECT,
        "capabilities": CAPABILITIES,
        "privileged": BOOL,
        "procMount": STRING,
        "readOnlyRootFilesystem": BOOL,
        "runAsGroup": INT,
        "runAsNonRoot": BOOL,
        "runAsUser": INT,
        "seLinuxOptions": OBJECT,
        "seccompProfile": SECCOMP,
        "windowsOptions": OBJECT,
    }
)
POD_SECURITY_CONTEXT = closed(
    {
        "appArmorProfile": OBJECT,
        "fsGroup": INT,
        "fsGroupChangePolicy": STRING,
        "runAsGroup": INT,
        "runAsNonRoot": BOOL,
        "runAsUser": INT,
        "seLinuxChangePolicy": STRING,
        "seLinuxOptions": OBJECT,
        "seccompProfile": SECCOMP,
        "supplementalGroups": array(INT),
        "supplementalGroupsPolicy": STRING,
        "sysctls": array(OBJECT),
        "windowsOptions": OBJECT,
    }
)
HTTP_GET = closed(
    {"path": STRING, "port": INT_OR_STRING, "host": STRING, "scheme": STRING, "httpHeaders": array(OBJECT)},
    ["port"],
)
PROBE = closed(
    {
        "exec": OBJECT,
        "grpc": OBJECT,
        "httpGet": HTTP_GET,
        "tcpSocket": OBJECT,
        "failureThreshold": INT,
        "initialDelaySeconds": INT,
        "periodSeconds": INT,
        "successThreshold": INT,
        "terminationGracePeriodSeconds": INT,
        "timeoutSeconds": INT,
    }
)
CONTAINER_PORT = closed(
    {
        "name": {"type": "string", "maxLength": 15},
        "containerPort": PORT_NUMBER,
        "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
        "hostIP": STRING,
        "hostPort": INT,
    },
    ["containerPort"],
)
ENV_VAR = closed({"name": STRING, "value": STRING, "valueFrom": OBJECT}, ["name"])
VOLUME_MOUNT = closed(
    {
        "name": STRING,
        "mountPath": STRING,
        "readOnly": BOOL,
        "subPath": STRING,
        "subPathExpr": STRING,
        "mountPropagation": STRING,
        "recursiveReadOnly": STRING,
    },
    ["name", "mountPath"],
)
RESOURCES = closed(
    {
        "requests": {"type": "object", "additionalProperties": INT_OR_STRING},
        "limits": {"type": "object", "additionalProperties": INT_OR_STRING},
        "claims": array(OBJECT),
    }
)
CONTAINER = closed(
    {
        "name": LABEL_NAME,
        "image": STRING,
        "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        "args": strings(),
        "command": strings(),
        "env": array(ENV_VAR),
        "envFrom": array(OBJECT),
        "lifecycle": OBJECT,
        "livenessProbe": PROBE,
        "readinessProbe": PROBE,
        "startupProbe": PROBE,
        "ports": array(CONTAINER_PORT),
        "resizePolicy": array(OBJECT),
        "resources": RESOURCES,
        "restartPolicy": STRING,
        "securityContext": SECURITY_CONTEXT,
        "stdin": BOOL,
        "stdinOnce": BOOL,
        "terminationMessagePath": STRING,
        "terminationMessagePolicy": STRING,
        "tty": BOOL,
        "volumeDevices": array(OBJECT),
        "volumeMounts": array(VOLUME_MOUNT),
        "workingDir": STRING,
    },
    ["name", "image"],
)
SECRET_VOLUME = closed(
    {"secretName": NAME, "defaultMode": {"type": "integer", "minimum": 0, "maximum": 511}, "items": array(OBJECT), "optional": BOOL}
)
PROJECTED_VOLUME = closed(
    {
        "defaultMode": {"type": "integer", "minimum": 0, "maximum": 511},
        "sources": array(
            closed(
                {
                    "serviceAccountToken": closed(
                        {"path": STRING, "audience": STRING, "expirationSeconds": {"type": "integer", "minimum": 600}},
                        ["path"],
                    ),
                    "secret": OBJECT,
                    "configMap": OBJECT,
                    "downwardAPI": OBJECT,
                }
            ),
            1,
        ),
    },
    ["sources"],
)
VOLUME: Schema = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": LABEL_NAME, "secret": SECRET_VOLUME, "projected": PROJECTED_VOLUME},
    "minProperties": 2,
}
POD_SPEC = closed(
    {
        "activeDeadlineSeconds": INT,
        "affinity": OBJECT,
        "automountServiceAccountToken": BOOL,
        "containers": array(CONTAINER, 1),
        "dnsConfig": OBJECT,
        "dnsPolicy": STRING,
        "enableServiceLinks": BOOL,
        "ephemeralContainers": array(OBJECT),
        "hostAliases": array(OBJECT),
        "hostIPC": BOOL,
        "hostNetwork": BOOL,
        "hostPID": BOOL,
        "hostUsers": BOOL,
        "hostname": STRING,
        "imagePullSecrets": array(closed({"name": NAME}, ["name"])),
        "initContainers": array(CONTAINER),
        "nodeName": STRING,
        "nodeSelector": STRING_MAP,
        "os": OBJECT,
        "overhead": OBJECT,
        "preemptionPolicy": STRING,
        "priority": INT,
        "priorityClassName": STRING,
        "readinessGates": array(OBJECT),
        "resourceClaims": array(OBJECT),
        "resources": RESOURCES,
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]},
        "runtimeClassName": STRING,
        "schedulerName": STRING,
        "schedulingGates": array(OBJECT),
        "securityContext": POD_SECURITY_CONTEXT,
        "serviceAccount": STRING,
        "serviceAccountName": NAME,
        "setHostnameAsFQDN": BOOL,
        "shareProcessNamespace": BOOL,
        "subdomain": STRING,
        "terminationGracePeriodSeconds": INT,
        "tolerations": array(OBJECT),
        "topologySpreadConstraints": array(
            {
                "type": "object",
                "required": ["maxSkew", "topologyKey", "whenUnsatisfiable"],
                "properties": {"labelSelector": LABEL_SELECTOR},
            }
        ),
        "volumes": array(VOLUME),
    },
    ["containers"],
)
POD_TEMPLATE = closed(
    {"metadata": closed({"labels": STRING_MAP, "annotations": STRING_MAP}), "spec": POD_SPEC}, ["spec"]
)
POLICY_RULE = closed(
    {
        "apiGroups": strings(),
        "resources": strings(),
        "verbs": array(STRING, 1),
        "resourceNames": strings(),
        "nonResourceURLs": strings(),
    },
    ["verbs"],
)
ROLE_REF = closed(
    {"apiGroup": {"const": "rbac.authorization.k8s.io"}, "kind": {"enum": ["Role", "ClusterRole"]}, "name": NAME},
    ["apiGroup", "kind", "name"],
)
SUBJECT = closed(
    {"kind": {"enum": ["ServiceAccount", "User", "Group"]}, "name": STRING, "namespace": LABEL_NAME, "apiGroup": STRING},
    ["kind", "name"],
)
SERVICE_PORT = closed(
    {
        "name": LABEL_NAME,
        "port": PORT_NUMBER,
        "targetPort": INT_OR_STRING,
        "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
        "nodePort": INT,
        "appProtocol": STRING,
    },
    ["port"],
)
NETWORK_POLICY_PORT = closed({"port": INT_OR_STRING, "protocol": {"enum": ["TCP", "UDP", "SCTP"]}, "endPort": INT})
VAP_VALIDATION = closed(
    {
        "expression": {"type": "string", "minLength": 1},
        "message": {"type": "string", "pattern": r"^[^\n]*$"},
        "messageExpression": STRING,
        "reason": {"enum": ["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"]},
    },
    ["expression"],
)
RESOURCE_RULE = closed(
    {
        "apiGroups": strings(),
        "apiVersions": strings(),
        "operations": strings(["CREATE", "UPDATE", "DELETE", "CONNECT", "*"]),
        "resources": strings(),
        "resourceNames": strings(),
        "scope": STRING,
    },
    ["operations", "resources"],
)
MATCH_RESOURCES = closed(
    {
        "resourceRules": array(RESOURCE_RULE),
        "excludeResourceRules": array(RESOURCE_RULE),
        "namespaceSelector": LABEL_SELECTOR,
        "objectSelector": LABEL_SELECTOR,
        "matchPolicy": {"enum": ["Exact", "Equivalent"]},
    }
)


def kind(api_version: str, name: str, namespaced: bool, body: Schema | None = None, required: list[str] | None = None) -> Schema:
    """A whole object: apiVersion and kind fixed, metadata, and the kind's own top-level fields."""
    props: Schema = {"apiVersion": {"const": api_version}, "kind": {"const": name}, "metadata": metadata(namespaced)}
    props.update(body or {})
    return closed(props, ["apiVersion", "kind", "metadata", *(required or [])])


# What admission policies (validating and mutating) share.
MATCH_CONDITIONS = array(closed({"name": STRING, "expression": STRING}, ["name", "expression"]))
POLICY_VARIABLES = array(
    closed({"name": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}, "expression": STRING}, ["name", "expression"])
)


KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "ServiceAccount"): kind(
        "v1", "ServiceAccount", True, {"automountServiceAccountToken": BOOL, "imagePullSecrets": array(OBJECT), "secrets": array(OBJECT)}
    ),
    ("v1", "Secret"): kind(
        "v1",
        "Secret",
        True,
        {
            "type": STRING,
            "data": {"type": "object", "additionalProperties": {"type": "string", "contentEncoding": "base64"}},
            "stringData": STRING_MAP,
            "immutable": BOOL,
        },
    ),
    ("v1", "Service"): kind(
        "v1",
        "Service",
        True,
        {
            "spec": closed(
                {
                    "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]},
                    "selector": STRING_MAP,
                    "ports": array(SERVICE_PORT, 1),
                    "clusterIP": STRING,
                    "sessionAffinity": STRING,
                    "externalTrafficPolicy": STRING,
                    "internalTrafficPolicy": STRING,
                    "ipFamilyPolicy": STRING,
                    "loadBalancerClass": STRING,
                    "trafficDistribution": STRING,
                },
                ["ports"],
            )
        },
        ["spec"],
    ),
    ("v1", "Pod"): kind("v1", "Pod", True, {"spec": POD_SPEC}, ["spec"]),
    ("v1", "ConfigMap"): kind("v1", "ConfigMap", True, {"data": STRING_MAP, "binaryData": STRING_MAP, "immutable": BOOL}),
    ("monitoring.coreos.com/v1", "PrometheusRule"): kind(
        "monitoring.coreos.com/v1",
        "PrometheusRule",
        True,
        {
            "spec": closed(
                {
                    "groups": array(
                        closed(
                            {
                                "name": STRING,
                                "interval": STRING,
                                "rules": array(
                                    closed(
                                        {
                                            "alert": STRING,
                                            "record": STRING,
                                            "expr": STRING,
                                            "for": STRING,
                                            "keep_firing_for": STRING,
                                            "labels": STRING_MAP,
                                            "annotations": STRING_MAP,
                                        },
                                        ["expr"],
                                    ),
                                    1,
                                ),
                            },
                            ["name", "rules"],
                        ),
                        1,
                    )
                },
                ["groups"],
            )
        },
        ["spec"],
    ),
    ("apps/v1", "Deployment"): kind(
        "apps/v1",
        "Deployment",
        True,
        {
            "spec": closed(
                {
                    "replicas": {"type": "integer", "minimum": 0},
                    "selector": LABEL_SELECTOR,
                    "template": POD_TEMPLATE,
                    "strategy": OBJECT,
                    "minReadySeconds": INT,
                    "revisionHistoryLimit": INT,
                    "progressDeadlineSeconds": INT,
                    "paused": BOOL,
                },
                ["selector", "template"],
            )
        },
        ["spec"],
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): kind(
        "rbac.authorization.k8s.io/v1", "ClusterRole", False, {"rules": array(POLICY_RULE), "aggregationRule": OBJECT}
    ),
    ("rbac.authorization.k8s.io/v1", "Role"): kind("rbac.authorization.k8s.io/v1", "Role", True, {"rules": array(POLICY_RULE)}),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): kind(
        "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False, {"roleRef": ROLE_REF, "subjects": array(SUBJECT)}, ["roleRef"]
    ),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): kind(
        "rbac.authorization.k8s.io/v1", "RoleBinding", True, {"roleRef": ROLE_REF, "subjects": array(SUBJECT)}, ["roleRef"]
    ),
    ("policy/v1", "PodDisruptionBudget"): kind(
        "policy/v1",
        "PodDisruptionBudget",
        True,
        {
            "spec": closed(
                {
                    "minAvailable": INT_OR_STRING,
                    "maxUnavailable": INT_OR_STRING,
                    "selector": LABEL_SELECTOR,
                    "unhealthyPodEvictionPolicy": STRING,
                },
                ["selector"],
            )
        },
        ["spec"],
    ),
    ("networking.k8s.io/v1", "NetworkPolicy"): kind(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        True,
        {
            "spec": closed(
                {
                    "podSelector": LABEL_SELECTOR,
                    "policyTypes": strings(["Ingress", "Egress"]),
                    "ingress": array(closed({"from": array(OBJECT, 1), "ports": array(NETWORK_POLICY_PORT)})),
                    "egress": array(closed({"to": array(OBJECT, 1), "ports": array(NETWORK_POLICY_PORT)})),
                },
                ["podSelector"],
            )
        },
        ["spec"],
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): kind(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        True,
        {
            "spec": closed(
                {
                    "selector": LABEL_SELECTOR,
                    "namespaceSelector": OBJECT,
                    "jobLabel": STRING,
                    "endpoints": array(
                        closed(
                            {
                                "port": STRING,
                                "targetPort": INT_OR_STRING,
                                "path": STRING,
                                "scheme": STRING,
                                "interval": STRING,
                                "scrapeTimeout": STRING,
                                "honorLabels": BOOL,
                                "relabelings": array(OBJECT),
                                "metricRelabelings": array(OBJECT),
                            }
                        ),
                        1,
                    ),
                },
                ["selector", "endpoints"],
            )
        },
        ["spec"],
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): kind(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        False,
        {
            "spec": closed(
                {
                    "failurePolicy": {"enum": ["Fail", "Ignore"]},
                    "matchConstraints": MATCH_RESOURCES,
                    "matchConditions": MATCH_CONDITIONS,
                    "variables": POLICY_VARIABLES,
                    "validations": array(VAP_VALIDATION, 1),
                    "auditAnnotations": array(OBJECT),
                    "paramKind": OBJECT,
                },
                ["matchConstraints", "validations"],
            )
        },
        ["spec"],
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): kind(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        False,
        {
            "spec": closed(
                {
                    "policyName": NAME,
                    "validationActions": {
                        "type": "array",
                        "minItems": 1,
                        "uniqueItems": True,
                        "items": {"enum": ["Deny", "Warn", "Audit"]},
                    },
                    "matchResources": MATCH_RESOURCES,
                    "paramRef": OBJECT,
                },
                ["policyName", "validationActions"],
            )
        },
        ["spec"],
    ),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): kind(
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicy",
        False,
        {
            "spec": closed(
                {
                    "failurePolicy": {"enum": ["Fail", "Ignore"]},
                    "reinvocationPolicy": {"enum": ["Never", "IfNeeded"]},
                    "matchConstraints": MATCH_RESOURCES,
                    "matchConditions": MATCH_CONDITIONS,
                    "variables": POLICY_VARIABLES,
                    "mutations": array(
                        closed(
                            {
                                "patchType": {"enum": ["ApplyConfiguration", "JSONPatch"]},
                                "applyConfiguration": closed({"expression": STRING}, ["expression"]),
                                "jsonPatch": closed({"expression": STRING}, ["expression"]),
                            },
                            ["patchType"],
                        ),
                        1,
                    ),
                    "paramKind": OBJECT,
                },
                ["matchConstraints", "mutations", "reinvocationPolicy"],
            )
        },
        ["spec"],
    ),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): kind(
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicyBinding",
        False,
        {
            "spec": closed(
                {"policyName": NAME, "matchResources": MATCH_RESOURCES, "paramRef": OBJECT},
                ["policyName"],
            )
        },
        ["spec"],
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "apiextensions.k8s.io/v1"},
            "kind": {"const": "CustomResourceDefinition"},
            "metadata": metadata(False),
            "spec": {
                "type": "object",
                "required": ["group", "names", "scope", "versions"],
                "properties": {
                    "scope": {"enum": ["Namespaced", "Cluster"]},
                    "names": {"type": "object", "required": ["kind", "plural"]},
                    "versions": array(
                        {
                            "type": "object",
                            "required": ["name", "served", "storage", "schema"],
                            "properties": {"schema": {"type": "object", "required": ["openAPIV3Schema"]}},
                        },
                        1,
                    ),
                },
            },
        },
    },
}
