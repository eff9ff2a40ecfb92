# Extracts, from openai/openai-openapi's openapi.yaml, the required fields and JSON types of
# the Responses API objects and stream events pistil emits, into responses_schema.json
# (read by responses_test.go). Run: python3 responses_schema.py path/to/openapi.yaml COMMIT
import json, sys, yaml

spec = yaml.safe_load(open(sys.argv[1]))
S = spec["components"]["schemas"]

def resolve(s):
    while "$ref" in s:
        s = S[s["$ref"].split("/")[-1]]
    return s

def types(s):
    s = resolve(s)
    if "anyOf" in s or "oneOf" in s:
        out = set()
        for alt in s.get("anyOf", s.get("oneOf")):
            out |= types(alt)
        return out
    if "allOf" in s:
        return {"object"}
    t = s.get("type")
    if t is None:
        return {"object"} if "properties" in s else {"any"}
    return set(t) if isinstance(t, list) else {t}

def flatten(name):
    s = S[name]
    req, props = set(s.get("required", [])), dict(s.get("properties", {}))
    for part in s.get("allOf", []):
        if "$ref" in part:
            r, p = flatten(part["$ref"].split("/")[-1])
        else:
            r, p = set(part.get("required", [])), part.get("properties", {})
        req |= r
        props.update(p)
    return req, props

def entry(name):
    req, props = flatten(name)
    out = {"required": sorted(req), "types": {}}
    for k, v in props.items():
        out["types"][k] = sorted(types(v))
    if "type" in props and "enum" in resolve(props["type"]):
        out["type"] = resolve(props["type"])["enum"][0]
    return out

names = ["Response", "ResponseUsage", "OutputMessage", "OutputTextContent", "FunctionToolCall",
         "ReasoningItem", "ReasoningTextContent", "SummaryTextContent",
         "ResponseCreatedEvent", "ResponseInProgressEvent", "ResponseCompletedEvent",
         "ResponseIncompleteEvent", "ResponseFailedEvent", "ResponseErrorEvent",
         "ResponseOutputItemAddedEvent", "ResponseOutputItemDoneEvent",
         "ResponseContentPartAddedEvent", "ResponseContentPartDoneEvent",
         "ResponseTextDeltaEvent", "ResponseTextDoneEvent",
         "ResponseFunctionCallArgumentsDeltaEvent", "ResponseFunctionCallArgumentsDoneEvent",
         "ResponseReasoningTextDeltaEvent", "ResponseReasoningTextDoneEvent",
         "ResponseReasoningSummaryPartAddedEvent", "ResponseReasoningSummaryPartDoneEvent",
         "ResponseReasoningSummaryTextDeltaEvent", "ResponseReasoningSummaryTextDoneEvent"]
doc = {"source": "openai/openai-openapi openapi.yaml at " + sys.argv[2], "schemas": {n: entry(n) for n in names}}
json.dump(doc, open("responses_schema.json", "w"), indent=1, sort_keys=True)
