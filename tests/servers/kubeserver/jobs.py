"""A minimal kubelet + job controller + volume provisioner for the test API server.

It runs the ``batch/v1`` Jobs whose container image is Modelplane's own (``KUBESERVER_JOB_IMAGES``,
comma-separated prefixes; default ``ghcr.io/modelplane/modelplane``) as local processes, so the
in-cluster cache fill is tested end to end with the real downloader:

* PersistentVolumeClaims are bound at once (``status.phase: Bound``, capacity = request); each claim is
  the directory ``<workdir>/volumes/<namespace>/<claim>``.
* The image is emulated from ``deployments/Dockerfile`` (:func:`modelplane_image`): the process starts in
  the image's ``WORKDIR`` (``container.workingDir`` if set), which is this checkout, with the image's ``ENV``
  under the container's ``env``; a path below the WORKDIR in an argument or env value becomes the checkout's.
* In-cluster credentials: unless ``automountServiceAccountToken`` is false, ``KUBECONFIG`` (when the
  container does not set it) names a kubeconfig for the Pod's service account (``serviceAccountName``,
  default ``default``) whose token makes the server log its requests as
  ``system:serviceaccount:<namespace>:<name>`` (see server.py), so a test can check them against RBAC.
* A Job gets one Pod at a time (labels ``job-name``/``batch.kubernetes.io/job-name``/``controller-uid``,
  owned by the Job). Its first container runs with ``command`` + ``args``; ``envFrom`` and ``env`` are
  resolved from ConfigMaps and Secrets (a missing one or key, unless optional, leaves the Pod ``Pending`` with
  ``CreateContainerConfigError``, as the kubelet does). Mount paths of PVC and emptyDir volumes, and the
  ``terminationMessagePath``, are mapped to directories under the workdir: every argument or env value
  equal to a mount path or below it is rewritten. ``modelplane`` and ``python`` resolve to this venv.
* When the process exits, the Pod gets ``Succeeded``/``Failed`` with the container's termination state
  (exit code, and the termination message: the file, or with ``FallbackToLogsOnError`` the log tail on
  failure). A failed Pod is replaced until ``backoffLimit`` is exceeded; the Job then gets
  ``Failed`` (``BackoffLimitExceeded``), or ``Complete`` with ``succeeded: 1``.
* ``ttlSecondsAfterFinished`` deletes finished Jobs (and their Pods); deleting a running Job kills its process.

Jobs with other images are left alone (they stay as created, like Pods that never get scheduled).
"""

from __future__ import annotations

import base64
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .server import USER_TOKEN_PREFIX
from .store import MERGE, ApiError, Obj, Store

DEFAULT_IMAGES = ("ghcr.io/modelplane/modelplane",)
REPO = pathlib.Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "deployments" / "Dockerfile"
MESSAGE_LIMIT = 4096
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
POLL_S = 0.1


def volume_path(workdir: str | os.PathLike[str], namespace: str, claim: str) -> pathlib.Path:
    """The directory backing PVC ``claim`` in ``namespace``."""
    return pathlib.Path(workdir) / "volumes" / namespace / claim


@dataclass(frozen=True)
class Image:
    """What the runner emulates of Modelplane's image: its WORKDIR (mapped to ``root``) and its ENV."""

    workdir: str
    env: dict[str, str]
    root: pathlib.Path


def modelplane_image(dockerfile: pathlib.Path = DOCKERFILE, root: pathlib.Path = REPO) -> Image:
    """The WORKDIR and ENV of ``dockerfile`` (``ENV K=V ...`` and ``WORKDIR $K`` forms), the WORKDIR standing
    for ``root``: the image is this checkout with this virtualenv."""
    import re
    import shlex

    env: dict[str, str] = {}
    workdir = "/"
    text = dockerfile.read_text() if dockerfile.is_file() else ""
    for line in text.replace("\\\n", " ").splitlines():
        match = re.match(r"^\s*(ENV|WORKDIR)\s+(.*)$", line)
        if not match:
            continue
        value = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), match.group(2).strip())
        if match.group(1) == "WORKDIR":
            workdir = value
        else:
            env.update(item.split("=", 1) for item in shlex.split(value) if "=" in item)
    return Image(workdir.rstrip("/") or "/", env, root)


def service_account_token(namespace: str, name: str) -> str:
    """The bearer token the server logs as ``system:serviceaccount:<namespace>:<name>``."""
    return f"{USER_TOKEN_PREFIX}system:serviceaccount:{namespace}:{name}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Run:
    """One Job being run: its current pod process, failures so far, when it finished."""

    uid: str
    namespace: str
    name: str
    failures: int = 0
    pod: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    pod_dir: pathlib.Path | None = None
    finished_at: float | None = None
    ttl: int | None = None
    message_path: pathlib.Path | None = None
    log_path: pathlib.Path | None = None
    fallback_to_logs: bool = False
    waiting: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class JobRunner:
    """Polls the store and drives PVCs, Jobs and their Pods (see the module docs)."""

    def __init__(
        self,
        store: Store,
        workdir: pathlib.Path,
        images: tuple[str, ...] = DEFAULT_IMAGES,
        api_url: str | None = None,
        image: Image | None = None,
    ) -> None:
        self.store = store
        self.workdir = workdir
        self.images = images
        self.api_url = api_url
        self.image = image or modelplane_image()
        self.runs: dict[str, _Run] = {}
        self._stop = threading.Event()
        self._types = {
            key: store.resolve(*key)
            for key in (
                ("batch", "v1", "jobs"),
                ("", "v1", "pods"),
                ("", "v1", "persistentvolumeclaims"),
                ("", "v1", "secrets"),
                ("", "v1", "configmaps"),
            )
        }

    def start(self) -> threading.Thread:
        """Run the control loop in a daemon thread."""
        thread = threading.Thread(target=self._loop, name="kubeserver-jobs", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop the loop and kill running processes (by their PIDs)."""
        self._stop.set()
        for run in self.runs.values():
            if run.proc is not None and run.proc.poll() is None:
                run.proc.kill()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.tick()
            except Exception:  # pragma: no cover - keep the controller alive, report to the server log
                import traceback

                traceback.print_exc()

    # ------------------------------------------------------------------------------------ one pass

    def tick(self) -> None:
        """One reconcile pass over PVCs and Jobs."""
        self._bind_claims()
        jobs = self.store.list(self._types[("batch", "v1", "jobs")], None)["items"]
        live = set()
        for job in jobs:
            meta = job["metadata"]
            live.add(meta["uid"])
            if not self._ours(job):
                continue
            run = self.runs.get(meta["uid"])
            if run is None:
                run = self.runs[meta["uid"]] = _Run(
                    meta["uid"], meta["namespace"], meta["name"], ttl=job["spec"].get("ttlSecondsAfterFinished")
                )
            self._drive(job, run)
        for uid in list(self.runs):
            if uid not in live:
                run = self.runs.pop(uid)
                if run.proc is not None and run.proc.poll() is None:
                    run.proc.kill()
                    run.proc.wait()

    def _ours(self, job: Obj) -> bool:
        containers = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        return bool(containers) and any(str(containers[0].get("image", "")).startswith(p) for p in self.images)

    def _bind_claims(self) -> None:
        rt = self._types[("", "v1", "persistentvolumeclaims")]
        for pvc in self.store.list(rt, None)["items"]:
            if (pvc.get("status") or {}).get("phase") == "Bound" or pvc["metadata"].get("deletionTimestamp"):
                continue
            spec = pvc.get("spec") or {}
            volume_path(self.workdir, pvc["metadata"]["namespace"], pvc["metadata"]["name"]).mkdir(
                parents=True, exist_ok=True
            )
            status = {
                "phase": "Bound",
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
            }
            self._patch_status(rt, pvc, status)

    def _patch_status(self, rt: Any, obj: Obj, status: Obj) -> None:
        meta = obj["metadata"]
        try:
            self.store.patch(rt, meta.get("namespace"), meta["name"], MERGE, {"status": status}, "status")
        except ApiError:
            pass  # deleted in between

    # ---------------------------------------------------------------------------------------- jobs

    def _drive(self, job: Obj, run: _Run) -> None:
        jobs_rt = self._types[("batch", "v1", "jobs")]
        status = job.get("status") or {}
        if run.finished_at is not None or any(
            c.get("status") == "True" and c.get("type") in ("Complete", "Failed")
            for c in status.get("conditions") or []
        ):
            if run.finished_at is None:
                run.finished_at = time.monotonic()
            if run.ttl is not None and time.monotonic() - run.finished_at >= run.ttl:
                try:
                    self.store.delete(jobs_rt, run.namespace, run.name, {"propagationPolicy": "Background"})
                except ApiError:
                    pass
            return
        if run.proc is None:
            self._start_pod(job, run)
            return
        code = run.proc.poll()
        if code is None:
            return
        self._finish_pod(job, run, code)

    def _start_pod(self, job: Obj, run: _Run) -> None:
        template = job["spec"]["template"]
        pod_spec = template.get("spec") or {}
        container = pod_spec["containers"][0]
        pods_rt = self._types[("", "v1", "pods")]
        if run.pod is None:
            run.pod = f"{run.name}-{''.join(secrets.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
            labels = {
                **((template.get("metadata") or {}).get("labels") or {}),
                "job-name": run.name,
                "batch.kubernetes.io/job-name": run.name,
                "controller-uid": run.uid,
                "batch.kubernetes.io/controller-uid": run.uid,
            }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": run.pod,
                    "namespace": run.namespace,
                    "labels": labels,
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": run.name,
                            "uid": run.uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": pod_spec,
            }
            self.store.create(pods_rt, run.namespace, pod)
            self._job_status(job, {"active": 1, "startTime": job.get("status", {}).get("startTime") or _now()})
        run.pod_dir = self.workdir / "pods" / run.namespace / run.pod
        run.pod_dir.mkdir(parents=True, exist_ok=True)
        message_path = container.get("terminationMessagePath") or "/dev/termination-log"
        run.message_path = run.pod_dir / "termination-log"
        run.message_path.write_text("")
        mounts = [(message_path, str(run.message_path)), *self._mounts(pod_spec, container, run)]
        mounts.append((self.image.workdir, str(self.image.root)))  # below every volume: the image's own files
        try:
            env = {k: _map(v, mounts) for k, v in {**self.image.env, **self._env(container, run.namespace)}.items()}
            env.update(self._credentials(pod_spec, run.namespace, env))
        except LookupError as exc:
            if not run.waiting:
                run.waiting = True
                self._pod_status(
                    run,
                    {
                        "phase": "Pending",
                        "containerStatuses": [
                            {
                                "name": container["name"],
                                "ready": False,
                                "restartCount": 0,
                                "image": container.get("image"),
                                "imageID": _image_id(container),
                                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}},
                            }
                        ],
                    },
                )
            return
        run.waiting = False
        argv = [_map(arg, mounts) for arg in [*(container.get("command") or []), *(container.get("args") or [])]]
        argv = argv or ["false"]
        argv[0] = _executable(argv[0])
        run.fallback_to_logs = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        run.log_path = run.pod_dir / "log"
        with open(run.log_path, "wb") as log:
            run.proc = subprocess.Popen(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=_map(container.get("workingDir") or self.image.workdir, mounts),
            )
        self._pod_status(
            run,
            {
                "phase": "Running",
                "startTime": _now(),
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "ready": True,
                        "restartCount": 0,
                        "image": container.get("image"),
                        "imageID": _image_id(container),
                        "state": {"running": {"startedAt": _now()}},
                    }
                ],
            },
        )

    def _finish_pod(self, job: Obj, run: _Run, code: int) -> None:
        container = job["spec"]["template"]["spec"]["containers"][0]
        message = run.message_path.read_bytes()[:MESSAGE_LIMIT].decode(errors="replace") if run.message_path else ""
        if not message.strip() and code != 0 and run.fallback_to_logs and run.log_path is not None:
            lines = run.log_path.read_bytes().decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            message = "\n".join(lines)[-LOG_TAIL_BYTES:]
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": _now()}
        if message:
            terminated["message"] = message
        self._pod_status(
            run,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "ready": False,
                        "restartCount": 0,
                        "image": container.get("image"),
                        "imageID": _image_id(container),
                        "state": {"terminated": terminated},
                    }
                ],
            },
        )
        run.proc = None
        run.pod = None
        if code == 0:
            self._job_status(
                job,
                {
                    "active": 0,
                    "succeeded": 1,
                    "completionTime": _now(),
                    "conditions": [
                        {
                            "type": "SuccessCriteriaMet",
                            "status": "True",
                            "reason": "CompletionsReached",
                            "message": "Reached expected number of succeeded pods",
                            "lastTransitionTime": _now(),
                        },
                        {
                            "type": "Complete",
                            "status": "True",
                            "reason": "CompletionsReached",
                            "message": "Reached expected number of succeeded pods",
                            "lastTransitionTime": _now(),
                        },
                    ],
                },
            )
            run.finished_at = time.monotonic()
            return
        run.failures += 1
        limit = job["spec"].get("backoffLimit", 6)
        if run.failures > limit:
            self._job_status(
                job,
                {
                    "active": 0,
                    "failed": run.failures,
                    "conditions": [
                        {
                            "type": "FailureTarget",
                            "status": "True",
                            "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit",
                            "lastTransitionTime": _now(),
                        },
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit",
                            "lastTransitionTime": _now(),
                        },
                    ],
                },
            )
            run.finished_at = time.monotonic()
        else:
            self._job_status(job, {"failed": run.failures})

    # ------------------------------------------------------------------------------------- helpers

    def _mounts(self, pod_spec: Obj, container: Obj, run: _Run) -> list[tuple[str, str]]:
        """(mount path, local directory) of each mounted PVC or emptyDir, longest path first."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        mounts: list[tuple[str, str]] = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"]) or {}
            if volume.get("persistentVolumeClaim"):
                local = volume_path(self.workdir, run.namespace, volume["persistentVolumeClaim"]["claimName"])
            elif "emptyDir" in volume:
                local = run.pod_dir / "volumes" / mount["name"]  # type: ignore[operator]
            else:
                continue
            if mount.get("subPath"):
                local = local / mount["subPath"]
            local.mkdir(parents=True, exist_ok=True)
            mounts.append((mount["mountPath"].rstrip("/") or "/", str(local)))
        return sorted(mounts, key=lambda m: -len(m[0]))

    def _env(self, container: Obj, namespace: str) -> dict[str, str]:
        """The process environment: a minimal base, then the container's ``envFrom`` ConfigMaps and Secrets (a
        later source wins), then its ``env`` with ConfigMap and Secret references resolved, as the kubelet does."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        for source in container.get("envFrom") or []:
            kind, ref = _reference(source, "configMapRef", "secretRef")
            if not ref:
                continue
            data = self._referenced_data(kind, namespace, ref["name"], bool(ref.get("optional")))
            env.update({source.get("prefix", "") + key: value for key, value in (data or {}).items()})
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = str(item["value"])
                continue
            value_from = item.get("valueFrom") or {}
            kind, ref = _reference(value_from, "configMapKeyRef", "secretKeyRef")
            if not ref:
                continue
            optional = bool(ref.get("optional"))
            data = self._referenced_data(kind, namespace, ref["name"], optional)
            if data is None:
                continue
            if ref["key"] not in data:
                if optional:
                    continue
                what = "ConfigMap" if kind == "configmaps" else "Secret"
                raise LookupError(f"couldn't find key {ref['key']} in {what} {namespace}/{ref['name']}")
            env[item["name"]] = data[ref["key"]]
        return env

    def _referenced_data(self, kind: str, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
        """The data of ConfigMap or Secret (``kind`` = its plural) ``name``, Secrets decoded; None when it is
        missing and optional (LookupError, the kubelet's CreateContainerConfigError, when it is not)."""
        try:
            obj = self.store.get(self._types[("", "v1", kind)], namespace, name)
        except ApiError:
            if optional:
                return None
            raise LookupError(f'{"configmap" if kind == "configmaps" else "secret"} "{name}" not found') from None
        if kind == "configmaps":
            return {key: str(value) for key, value in (obj.get("data") or {}).items()}
        return {key: base64.b64decode(value).decode() for key, value in (obj.get("data") or {}).items()}

    def _credentials(self, pod_spec: Obj, namespace: str, env: dict[str, str]) -> dict[str, str]:
        """``KUBECONFIG`` for the Pod's service account: what the kubelet's token mount gives a real Pod."""
        if self.api_url is None or "KUBECONFIG" in env or pod_spec.get("automountServiceAccountToken") is False:
            return {}
        account = pod_spec.get("serviceAccountName") or "default"
        path = self.workdir / "serviceaccounts" / namespace / account / "kubeconfig"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(kubeconfig(self.api_url, service_account_token(namespace, account), namespace))
        return {"KUBECONFIG": str(path)}

    def _pod_status(self, run: _Run, status: Obj) -> None:
        if run.pod is None:
            return
        pods_rt = self._types[("", "v1", "pods")]
        self._patch_status(pods_rt, {"metadata": {"namespace": run.namespace, "name": run.pod}}, status)

    def _job_status(self, job: Obj, status: Obj) -> None:
        self._patch_status(self._types[("batch", "v1", "jobs")], job, status)


def _reference(spec: Obj, config_map_field: str, secret_field: str) -> tuple[str, Obj | None]:
    """``(plural, reference)`` of an ``envFrom`` source or a ``valueFrom``: the ConfigMap's or the Secret's."""
    if config_map_field in spec:
        return "configmaps", spec[config_map_field]
    return "secrets", spec.get(secret_field)


def _image_id(container: Obj) -> str:
    """A stable digest-style image ID, as a kubelet reports the pulled image."""
    import hashlib

    return f"{container.get('image')}@sha256:{hashlib.sha256(str(container.get('image')).encode()).hexdigest()}"


def _map(value: str, mounts: list[tuple[str, str]]) -> str:
    """``value`` with a leading mount path replaced by its local directory."""
    for path, local in mounts:
        if value == path or value.startswith(path + "/"):
            return local + value[len(path) :]
    return value


def _executable(name: str) -> str:
    """``modelplane``/``python`` from this interpreter's environment; anything else from PATH."""
    here = pathlib.Path(sys.executable).parent
    if name in ("python", "python3"):
        return sys.executable
    candidate = here / name
    if candidate.exists():
        return str(candidate)
    return shutil.which(name) or name


def kubeconfig(url: str, token: str, namespace: str = "default") -> str:
    """A kubeconfig for the server at ``url`` with a bearer ``token`` (context ``kubeserver``)."""
    return (
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: kubeserver\n  cluster:\n    server: {url}\n"
        f"users:\n- name: kubeserver\n  user:\n    token: {token}\ncontexts:\n- name: kubeserver\n  context:\n"
        f"    cluster: kubeserver\n    user: kubeserver\n    namespace: {namespace}\ncurrent-context: kubeserver\n"
    )


def start_job_runner(store: Store, workdir: pathlib.Path, api_url: str | None = None) -> JobRunner:
    """Start the runner for ``store`` with the images named by ``KUBESERVER_JOB_IMAGES``; ``api_url`` (the
    server's) gives Pods their service account's credentials."""
    images = (
        tuple(p.strip() for p in os.environ.get("KUBESERVER_JOB_IMAGES", "").split(",") if p.strip()) or DEFAULT_IMAGES
    )
    runner = JobRunner(store, workdir, images, api_url)
    runner.start()
    return runner
