"""The OpenAPI generator: drf-spectacular's, plus the segment completion endpoints.

The completion endpoints (`console.api.completion`) and `POST /segments/reingested`
(`console.api.reingested`, a server completing a re-ingestion: round 2 §C.3) are plain Django
views that servers call, which drf-spectacular cannot see; `PinotSchemaGenerator` adds them from
the tables below (parameter names, headers and statuses are Pinot's, reference §5.1-§5.3). It is the
`DEFAULT_GENERATOR_CLASS` in settings, so this module must not import drf_spectacular.views (which
reads that setting at import time).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.generators import SchemaGenerator

from tables.domain.completion import Status

__all__ = ["PinotSchemaGenerator"]

COMPLETION_TAG = "Segment completion protocol"
RESPONSE_REF = {"$ref": "#/components/schemas/SegmentCompletionResponse"}
ERROR_REF = {"$ref": "#/components/schemas/PinotError"}
REQUIRED_PARAMS = [
    ("instance", "string", "the server's instance id (Server_<host>_<port>)"),
    ("name", "string", "the LLC segment name"),
    ("streamPartitionMsgOffset", "string", "the server's current offset"),
]
# Who the controller believes (tables.domain.completion_trust): the HTTP status of each refusal.
REFUSALS = {
    "400": "offsetPastEnd: the offset is beyond the stream partition's latest offset",
    "401": "noToken / badToken: no cluster token, or another one",
    "403": "instanceNotLive / notReplica: not a live participant holding a replica of the segment",
}
# path -> (method, summary, optional query parameters)
COMPLETION_ENDPOINTS: dict[str, tuple[str, str, list[tuple[str, str, str]]]] = {
    "/segmentConsumed": (
        "get",
        "A replica reached its end criteria; the lead controller answers HOLD, CATCH_UP, "
        "COMMIT, DISCARD, KEEP, NOT_LEADER or FAILED.",
        [
            ("reason", "string", "rowLimit, timeLimit, endOfPartitionGroup, ..."),
            ("rowCount", "integer", "rows consumed"),
            ("memoryUsedBytes", "integer", "memory used by the consuming segment"),
        ],
    ),
    "/segmentStoppedConsuming": (
        "get",
        "A replica gave up consuming this segment; answers PROCESSED.",
        [("reason", "string", "why it stopped")],
    ),
    "/segmentCommitStart": (
        "get",
        "The committer starts its commit; answers COMMIT_CONTINUE or FAILED.",
        [
            ("rowCount", "integer", "rows in the built segment"),
            ("buildTimeMillis", "integer", "build time"),
            ("segmentSizeBytes", "integer", "size of the built segment"),
        ],
    ),
    "/extendBuildTime": (
        "get",
        "The committer asks for more build time; answers PROCESSED.",
        [("extraTimeSec", "integer", "seconds to add (<= 0 means 120)")],
    ),
    "/segmentCommitEndWithMetadata": (
        "post",
        "The committer ends its commit with the segment's metadata files; answers "
        "COMMIT_SUCCESS or FAILED.",
        [
            ("location", "string", "where the segment was uploaded (required)"),
            ("rowCount", "integer", "rows in the segment"),
            ("buildTimeMillis", "integer", "build time"),
            ("segmentSizeBytes", "integer", "size of the segment"),
        ],
    ),
}


def _parameter(name: str, kind: str, description: str, required: bool) -> dict[str, Any]:
    return {
        "in": "query",
        "name": name,
        "required": required,
        "schema": {"type": kind},
        "description": description,
    }


def _completion_operation(path: str, method: str, summary: str, optional: list) -> dict:
    parameters = [_parameter(*p, required=True) for p in REQUIRED_PARAMS]
    parameters += [_parameter(*p, required=p[0] == "location") for p in optional]
    operation: dict[str, Any] = {
        "operationId": path.strip("/"),
        "summary": summary,
        "tags": [COMPLETION_TAG],
        "parameters": parameters,
        "security": [{"clusterToken": []}],
        "responses": {
            "200": {
                "description": "the controller's answer (also FAILED for a missing parameter)",
                "content": {"application/json": {"schema": RESPONSE_REF}},
            },
            **{
                code: {
                    "description": f"refused ({why}): FAILED with a `reason`; nothing changed",
                    "content": {"application/json": {"schema": RESPONSE_REF}},
                }
                for code, why in REFUSALS.items()
            },
        },
    }
    if method == "post":
        binary = {"type": "string", "format": "binary"}
        operation["requestBody"] = {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["metadata.properties", "creation.meta"],
                        "properties": {"metadata.properties": binary, "creation.meta": binary},
                    }
                }
            },
        }
    return operation


REINGESTED_PATH = "/segments/reingested"
# FileUploadDownloadClient.CustomHeaders the server sends (console.api.reingested)
REINGESTED_HEADERS = [
    ("UPLOAD_TYPE", "must be METADATA", ["METADATA"]),
    ("DOWNLOAD_URI", "where the server put the rebuilt tar (<raw>/<segment>.tmp.<uuid>)", None),
    ("COPY_SEGMENT_TO_DEEP_STORE", "must be true", ["true"]),
]
REINGESTED_ANSWERS = {
    "400": "a header is wrong or missing, no tableName, unreadable metadata, or the "
    "DOWNLOAD_URI is not in the deep store",
    "401": "no cluster token, or another one",
    "404": "Segment ZK metadata not found for segment",
    "409": "the segment is not COMMITTING",
    "500": "the metadata changed meanwhile (compare-and-set failed)",
}
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["code", "error"],
    "properties": {"code": {"type": "integer"}, "error": {"type": "string"}},
}


def _header(name: str, description: str, values: list[str] | None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if values:
        schema["enum"] = values
    return {
        "in": "header",
        "name": name,
        "required": True,
        "schema": schema,
        "description": description,
    }


def _reingested_operation() -> dict[str, Any]:
    binary = {"type": "string", "format": "binary"}
    table = "the raw table name"
    return {
        "operationId": "segments_reingested",
        "summary": "A server completes a re-ingested segment: its rebuilt copy goes to its final "
        "deep-store key, COMMITTING -> DONE, and every replica is reset.",
        "tags": [COMPLETION_TAG],
        "parameters": [
            _parameter("tableName", "string", table, required=True),
            *(_header(*h) for h in REINGESTED_HEADERS),
        ],
        "security": [{"clusterToken": []}],
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["metadata.properties", "creation.meta"],
                        "properties": {"metadata.properties": binary, "creation.meta": binary},
                    }
                }
            },
        },
        "responses": {
            "200": {
                "description": "the segment is DONE; its replicas were reset",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["status", "resetInstances"],
                            "properties": {
                                "status": {"type": "string"},
                                "resetInstances": {"type": "array", "items": {"type": "string"}},
                            },
                        }
                    }
                },
            },
            **{
                code: {
                    "description": f"refused: {why}; nothing changed",
                    "content": {"application/json": {"schema": ERROR_REF}},
                }
                for code, why in REINGESTED_ANSWERS.items()
            },
        },
    }


COMPLETION_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "streamPartitionMsgOffset", "buildTimeSec", "isSplitCommitType"],
    "properties": {
        "status": {"type": "string", "enum": [s.value for s in Status]},
        "streamPartitionMsgOffset": {"type": "string", "nullable": True},
        "buildTimeSec": {"type": "integer", "format": "int64", "description": "-1 if none"},
        "isSplitCommitType": {"type": "boolean", "description": "always true (deprecated)"},
        "controllerVipUrl": {"type": "string"},
        "segmentLocation": {"type": "string"},
        "commitStarted": {
            "type": "boolean",
            "description": "true when this segmentConsumed (startCommit=true) ran commit start",
        },
        "reason": {"type": "string", "description": "why a call was refused (4xx answers)"},
    },
}


class PinotSchemaGenerator(SchemaGenerator):
    """drf-spectacular's generator plus the segment completion protocol's endpoints and
    `POST /segments/reingested`."""

    def get_schema(self, request: Any = None, public: bool = False) -> dict[str, Any]:
        schema = super().get_schema(request=request, public=public)
        paths = dict(schema.get("paths", {}))
        for path, (method, summary, optional) in COMPLETION_ENDPOINTS.items():
            paths[path] = {method: _completion_operation(path, method, summary, optional)}
        paths[REINGESTED_PATH] = {"post": _reingested_operation()}
        schema["paths"] = dict(sorted(paths.items()))
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["SegmentCompletionResponse"] = COMPLETION_RESPONSE_SCHEMA
        components["PinotError"] = ERROR_SCHEMA
        schema["components"]["schemas"] = dict(sorted(components.items()))
        return schema
