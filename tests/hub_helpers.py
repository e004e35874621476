"""A Hugging Face Hub on localhost, for upload tests without a network: the real `huggingface_hub` client talks to it.

It answers the calls a plain commit makes (create repo, create branch, README metadata check, preupload, commit),
asks for every file as a "regular" (base64, in the commit itself) upload, and keeps each commit's files.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHub:
    """`with FakeHub() as hub:` serves on `hub.endpoint`; `hub.repos`, `hub.branches` and `hub.commits`
    (dicts with repo_id, revision, summary and files: {path: bytes}) record what was done."""

    def __init__(self):
        self.repos: list[dict] = []
        self.branches: list[tuple[str, str]] = []
        self.commits: list[dict] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:3] == ["api", "repos", "create"]:
                    request = json.loads(body)
                    repo_id = "/".join(filter(None, [request.get("organization"), request["name"]]))
                    hub.repos.append({"repo_id": repo_id, **request})
                    return self.reply({"url": f"{hub.endpoint}/{repo_id}", "name": repo_id, "id": repo_id})
                if parts[:2] == ["api", "validate-yaml"]:
                    return self.reply({})
                if parts[:2] == ["api", "models"] and len(parts) >= 6:
                    repo_id, action, revision = "/".join(parts[2:4]), parts[4], "/".join(parts[5:])
                    if action == "branch":
                        hub.branches.append((repo_id, revision))
                        return self.reply({})
                    if action == "preupload":
                        files = json.loads(body)["files"]
                        return self.reply({"files": [
                            {"path": file["path"], "uploadMode": "regular", "shouldIgnore": False} for file in files
                        ]})
                    if action == "commit":
                        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                        header = next(line["value"] for line in lines if line["key"] == "header")
                        files = {line["value"]["path"]: base64.b64decode(line["value"]["content"])
                                 for line in lines if line["key"] == "file"}
                        hub.commits.append({"repo_id": repo_id, "revision": revision, "summary": header["summary"],
                                            "files": files})
                        oid = f"{len(hub.commits):040x}"
                        return self.reply({"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid})
                self.reply({"error": f"the fake Hub does not serve POST {self.path}"}, status=404)

            def reply(self, payload: dict, status: int = 200):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
