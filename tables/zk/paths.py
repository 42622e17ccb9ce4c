"""Every ZooKeeper path of a Pinot/Helix cluster (reference §1.1). No path strings elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClusterPaths"]


@dataclass(frozen=True)
class ClusterPaths:
    cluster: str

    @property
    def root(self) -> str:
        return f"/{self.cluster}"

    # --- Helix ---------------------------------------------------------------------------------
    @property
    def idealstates(self) -> str:
        return f"{self.root}/IDEALSTATES"

    def idealstate(self, resource: str) -> str:
        return f"{self.idealstates}/{resource}"

    @property
    def externalviews(self) -> str:
        return f"{self.root}/EXTERNALVIEW"

    def externalview(self, resource: str) -> str:
        return f"{self.externalviews}/{resource}"

    @property
    def liveinstances(self) -> str:
        return f"{self.root}/LIVEINSTANCES"

    def liveinstance(self, instance: str) -> str:
        return f"{self.liveinstances}/{instance}"

    @property
    def instances(self) -> str:
        return f"{self.root}/INSTANCES"

    def instance(self, instance: str) -> str:
        return f"{self.instances}/{instance}"

    def messages(self, instance: str) -> str:
        return f"{self.instance(instance)}/MESSAGES"

    def message(self, instance: str, message_id: str) -> str:
        return f"{self.messages(instance)}/{message_id}"

    def currentstates(self, instance: str, session_id: str) -> str:
        return f"{self.instance(instance)}/CURRENTSTATES/{session_id}"

    def currentstate(self, instance: str, session_id: str, resource: str) -> str:
        return f"{self.currentstates(instance, session_id)}/{resource}"

    @property
    def configs(self) -> str:
        return f"{self.root}/CONFIGS"

    @property
    def cluster_config(self) -> str:
        return f"{self.configs}/CLUSTER/{self.cluster}"

    @property
    def participant_configs(self) -> str:
        return f"{self.configs}/PARTICIPANT"

    def participant_config(self, instance: str) -> str:
        return f"{self.participant_configs}/{instance}"

    def resource_config(self, resource: str) -> str:
        return f"{self.configs}/RESOURCE/{resource}"

    @property
    def controller(self) -> str:
        return f"{self.root}/CONTROLLER"

    @property
    def controller_leader(self) -> str:
        return f"{self.controller}/LEADER"

    @property
    def statemodeldefs(self) -> str:
        return f"{self.root}/STATEMODELDEFS"

    def statemodeldef(self, name: str) -> str:
        return f"{self.statemodeldefs}/{name}"

    # --- Pinot's property store ---------------------------------------------------------------
    @property
    def propertystore(self) -> str:
        return f"{self.root}/PROPERTYSTORE"

    def segments(self, table_name_with_type: str) -> str:
        return f"{self.propertystore}/SEGMENTS/{table_name_with_type}"

    def segment(self, table_name_with_type: str, segment: str) -> str:
        return f"{self.segments(table_name_with_type)}/{segment}"

    @property
    def table_configs(self) -> str:
        return f"{self.propertystore}/CONFIGS/TABLE"

    def table_config(self, table_name_with_type: str) -> str:
        return f"{self.table_configs}/{table_name_with_type}"

    @property
    def schemas(self) -> str:
        return f"{self.propertystore}/SCHEMAS"

    def schema(self, name: str) -> str:
        return f"{self.schemas}/{name}"

    def instance_partitions(self, name: str) -> str:
        return f"{self.propertystore}/INSTANCE_PARTITIONS/{name}"

    def controller_jobs(self, job_type: str) -> str:
        return f"{self.propertystore}/CONTROLLER_JOBS/{job_type}"

    def pauseless_debug(self, table_name_with_type: str) -> str:
        return f"{self.propertystore}/PAUSELESS_DEBUG_METADATA/{table_name_with_type}"
