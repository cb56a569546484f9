"""The book's Envoy YAML, read as Envoy and the control planes read it.

Run by tests/config/docs/envoy_yaml.rs with the xds-protos Python (tests/common/xds.rs). Reads
a JSON list of blocks on stdin, each {"where": "file:line", "kind": KIND, "text": YAML}, and
prints one line per problem; exits 1 when there is any, 0 after "checked N blocks".

What each KIND is checked against:
- bootstrap, http_filter, cluster, route_config, virtual_host, rate_limits: loaded with PyYAML
  and parsed by protobuf's json_format.ParseDict into Envoy's own message (Bootstrap,
  HttpFilter, Cluster, RouteConfiguration, VirtualHost, a list of route RateLimit), unknown
  fields refused; every `@type` Any inside is resolved from the messages xds-protos compiles
  (its package's modules are imported first, so a misspelled type URL fails too). This is
  what Envoy does with YAML: YAML to JSON, JSON to proto. Not checked: protoc-gen-validate
  rules (a missing required field, a port out of range) and whether Envoy's build has the
  extension.
- istio: each EnvoyFilter against Istio's CRD schema (field names, types, enums, required),
  and each configPatches[].patch.value parsed into the Envoy message its applyTo names (a
  MERGE patch is a partial message: parsed the same way, it is checked for names and types).
- envoy_gateway: an EnvoyPatchPolicy against Envoy Gateway's CRD schema, and each JSON patch's
  value parsed into the message its type and path name (path "" is the whole resource); the
  EnvoyGateway startup config (not a CRD: a file in a ConfigMap) for the keys the chapter uses,
  from the Go struct's JSON tags (api/v1alpha1/envoygateway_types.go).
- contour: ExtensionService and HTTPProxy against Contour's CRD schemas; the contour.yaml in a
  ConfigMap: its rateLimitService against the ContourConfiguration CRD's rateLimitService,
  which has the same fields under the same names (pkg/config/parameters.go) except that the
  file's extensionService is a "namespace/name" string.
The CRD schemas are tests/common/fixtures/envoy_crds.json (its "_source" says from where). A
Kubernetes object's metadata and a ConfigMap are checked for shape only.
"""

import importlib
import json
import os
import pkgutil
import re
import sys

import yaml
from google.protobuf import json_format

HERE = os.path.dirname(os.path.abspath(__file__))
CRDS = json.load(open(os.path.join(HERE, "fixtures", "envoy_crds.json")))

# Envoy messages by what the chapter calls a block, and by Istio's applyTo.
MESSAGES = {
    "bootstrap": "envoy.config.bootstrap.v3.Bootstrap",
    "http_filter": "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
    "cluster": "envoy.config.cluster.v3.Cluster",
    "route_config": "envoy.config.route.v3.RouteConfiguration",
    "virtual_host": "envoy.config.route.v3.VirtualHost",
    "route": "envoy.config.route.v3.Route",
    "listener": "envoy.config.listener.v3.Listener",
    "network_filter": "envoy.config.listener.v3.Filter",
    "rate_limit": "envoy.config.route.v3.RateLimit",
}
ISTIO_APPLY_TO = {
    "HTTP_FILTER": "http_filter",
    "CLUSTER": "cluster",
    "VIRTUAL_HOST": "virtual_host",
    "HTTP_ROUTE": "route",
    "ROUTE_CONFIGURATION": "route_config",
    "LISTENER": "listener",
    "NETWORK_FILTER": "network_filter",
}


def import_package(package):
    """Imports every compiled module of a proto package, so its messages are in the pool."""
    try:
        mod = importlib.import_module(package)
    except ImportError:
        return
    for info in pkgutil.iter_modules(getattr(mod, "__path__", [])):
        if info.name.endswith("_pb2"):
            importlib.import_module(package + "." + info.name)


def type_urls(value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "@type" and isinstance(v, str):
                out.add(v.rsplit("/", 1)[-1])
            else:
                type_urls(v, out)
    elif isinstance(value, list):
        for v in value:
            type_urls(v, out)


def message_class(full_name):
    from google.protobuf import symbol_database

    import_package(full_name.rsplit(".", 1)[0])
    return symbol_database.Default().GetSymbol(full_name)


def parse_envoy(value, full_name):
    """ParseDict into `full_name`, unknown fields refused; '' or the error."""
    names = set()
    type_urls(value, names)
    for name in names:
        import_package(name.rsplit(".", 1)[0])
    try:
        json_format.ParseDict(value, message_class(full_name)(), ignore_unknown_fields=False)
    except Exception as e:  # ParseError, or a KeyError/TypeError on a bad Any
        return "%s: %s" % (full_name.rsplit(".", 1)[-1], e)
    return ""


def parse_envoy_list(value, full_name):
    if not isinstance(value, list):
        return "expected a list of %s" % full_name
    for i, item in enumerate(value):
        p = parse_envoy(item, full_name)
        if p:
            return "[%d] %s" % (i, p)
    return ""


def check_schema(value, schema, path, problems):
    """A structural OpenAPI v3 check as the API server does it for a CRD: types, enums, required
    and, unless the schema preserves unknown fields, no field it does not name."""
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            problems.append("%s: expected an integer or a string" % path)
        return
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        if not isinstance(value, dict):
            problems.append("%s: expected an object" % path)
            return
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            if req not in value:
                problems.append("%s: `%s` is required" % (path, req))
        for k, v in value.items():
            if k in props:
                check_schema(v, props[k], path + "." + k, problems)
            elif isinstance(schema.get("additionalProperties"), dict):
                check_schema(v, schema["additionalProperties"], path + "." + k, problems)
            elif not (schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("additionalProperties") is True):
                if props:
                    problems.append("%s: unknown field `%s` (known: %s)" % (path, k, ", ".join(sorted(props))))
        return
    if kind == "array":
        if not isinstance(value, list):
            problems.append("%s: expected a list" % path)
            return
        for i, v in enumerate(value):
            check_schema(v, schema.get("items", {}), "%s[%d]" % (path, i), problems)
        return
    expect = {"string": str, "boolean": bool, "integer": int, "number": (int, float)}.get(kind)
    if expect and (not isinstance(value, expect) or (kind in ("integer", "number") and isinstance(value, bool))):
        problems.append("%s: expected %s, got %r" % (path, kind, value))
        return
    if "enum" in schema and value not in schema["enum"]:
        problems.append("%s: %r is not one of %s" % (path, value, schema["enum"]))


def check_crd(doc, problems):
    """`doc` against its kind's CRD schema; True when the kind is one of the known CRDs."""
    crd = CRDS.get(doc.get("kind"))
    if crd is None:
        return False
    want = "%s/%s" % (crd["group"], crd["version"])
    if doc.get("apiVersion") != want:
        problems.append("apiVersion: %r, the CRD serves %s" % (doc.get("apiVersion"), want))
    # Every object has these; the CRD's schema names only what its kind adds.
    named = crd["schema"].get("properties", {})
    body = {k: v for k, v in doc.items() if k in named or k not in ("apiVersion", "kind", "metadata")}
    if not isinstance(doc.get("metadata", {}), dict) or not doc.get("metadata", {}).get("name"):
        problems.append("%s: metadata.name is required" % doc["kind"])
    check_schema(body, crd["schema"], doc["kind"], problems)
    return True


def check_istio(doc, problems):
    if doc.get("kind") != "EnvoyFilter":
        problems.append("an istio block holds EnvoyFilters, not %r" % doc.get("kind"))
        return
    check_crd(doc, problems)
    for i, patch in enumerate(doc.get("spec", {}).get("configPatches", [])):
        kind = ISTIO_APPLY_TO.get(patch.get("applyTo"))
        if kind is None:
            problems.append("configPatches[%d]: applyTo %r: no message known for it here" % (i, patch.get("applyTo")))
            continue
        p = parse_envoy(patch.get("patch", {}).get("value", {}), MESSAGES[kind])
        if p:
            problems.append("configPatches[%d].patch.value: %s" % (i, p))


# A JSON patch's value, by the resource it patches and where: (resource, path pattern, message,
# whether the value is a list of it).
EG_PATCH_VALUES = [
    ("envoy.config.listener.v3.Listener", r"/http_filters/(\d+|-)$", "http_filter", False),
    ("envoy.config.route.v3.RouteConfiguration", r"/rate_limits$", "rate_limit", True),
    ("envoy.config.route.v3.RouteConfiguration", r"/rate_limits/(\d+|-)$", "rate_limit", False),
    ("envoy.config.route.v3.RouteConfiguration", r"/virtual_hosts/(\d+|-)$", "virtual_host", False),
]

# EnvoyGateway (the startup config) keys the chapter may use, from envoygateway_types.go.
EG_CONFIG_KEYS = {
    "": {"apiVersion", "kind", "provider", "gateway", "extensionApis", "rateLimit", "logging",
         "admin", "telemetry", "extensionManager", "runtimeFlags"},
    "provider": {"type", "kubernetes", "custom"},
    "gateway": {"controllerName"},
    "extensionApis": {"enableEnvoyPatchPolicy", "enableBackend"},
}


def check_envoy_gateway(doc, problems):
    if doc.get("kind") == "EnvoyGateway":
        if doc.get("apiVersion") != "gateway.envoyproxy.io/v1alpha1":
            problems.append("EnvoyGateway: apiVersion %r" % doc.get("apiVersion"))
        for section, keys in EG_CONFIG_KEYS.items():
            part = doc if section == "" else doc.get(section, {})
            for k in part:
                if k not in keys:
                    problems.append("EnvoyGateway.%s: unknown field `%s`" % (section or "(top)", k))
        return
    if doc.get("kind") == "ConfigMap":
        for name, text in doc.get("data", {}).items():
            for inner in yaml.safe_load_all(text):
                check_envoy_gateway(inner, problems)
        return
    if doc.get("kind") != "EnvoyPatchPolicy":
        problems.append("an envoy_gateway block holds EnvoyPatchPolicy and EnvoyGateway config, not %r" % doc.get("kind"))
        return
    check_crd(doc, problems)
    for i, patch in enumerate(doc.get("spec", {}).get("jsonPatches", [])):
        resource = patch.get("type", "").rsplit("/", 1)[-1]
        op = patch.get("operation", {})
        path, value = op.get("path", ""), op.get("value")
        if value is None:
            continue
        if path == "":
            p = parse_envoy(value, resource)
        else:
            for res, pattern, kind, is_list in EG_PATCH_VALUES:
                if res == resource and re.search(pattern, path):
                    p = (parse_envoy_list if is_list else parse_envoy)(value, MESSAGES[kind])
                    break
            else:
                p = "no message known here for a patch of %s at %s" % (resource, path)
        if p:
            problems.append("jsonPatches[%d].operation.value: %s" % (i, p))


def check_contour(doc, problems):
    if doc.get("kind") == "ConfigMap":
        for name, text in doc.get("data", {}).items():
            config = yaml.safe_load(text)
            if not isinstance(config, dict):
                problems.append("ConfigMap data %s: not a map" % name)
                continue
            rls = CRDS["ContourConfiguration"]["schema"]["properties"]["spec"]["properties"]["rateLimitService"]
            section = config.get("rateLimitService")
            if not isinstance(section, dict):
                problems.append("contour.yaml: no rateLimitService")
                continue
            # The one difference from the CRD: the file names the ExtensionService as
            # "namespace/name" (a string), the CRD as {namespace, name}.
            service = section.get("extensionService")
            if not (isinstance(service, str) and re.fullmatch(r"[a-z0-9-]+/[a-z0-9-]+", service)):
                problems.append("contour.yaml.rateLimitService.extensionService: %r is not \"namespace/name\"" % service)
            rest = {k: v for k, v in section.items() if k != "extensionService"}
            rls = dict(rls, required=[])
            check_schema(rest, rls, "contour.yaml.rateLimitService", problems)
        return
    if doc.get("kind") not in ("ExtensionService", "HTTPProxy"):
        problems.append("a contour block holds ExtensionService, HTTPProxy and Contour's ConfigMap, not %r" % doc.get("kind"))
        return
    check_crd(doc, problems)


def check_block(kind, text):
    problems = []
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        return ["YAML: %s" % e]
    if not docs:
        return ["no YAML document"]
    for doc in docs:
        if kind in ("istio", "envoy_gateway", "contour"):
            if not isinstance(doc, dict):
                problems.append("expected a Kubernetes object")
                continue
            {"istio": check_istio, "envoy_gateway": check_envoy_gateway, "contour": check_contour}[kind](doc, problems)
        elif kind == "rate_limits":
            p = parse_envoy_list(doc, MESSAGES["rate_limit"])
            if p:
                problems.append(p)
        elif kind in MESSAGES:
            p = parse_envoy(doc, MESSAGES[kind])
            if p:
                problems.append(p)
        else:
            problems.append("unknown kind %r (known: %s)" % (kind, ", ".join(sorted(list(MESSAGES) + ["rate_limits", "istio", "envoy_gateway", "contour"]))))
    return problems


def main():
    blocks = json.load(sys.stdin)
    failed = False
    for block in blocks:
        for p in check_block(block["kind"], block["text"]):
            failed = True
            print("%s (envoy=%s): %s" % (block["where"], block["kind"], p))
    print("checked %d blocks" % len(blocks))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
