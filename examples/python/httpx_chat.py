"""A chat completion through failoverd with httpx: failoverd picks the
upstream, httpx makes the call, failoverd hears what happened.

    python3 httpx_chat.py --server 127.0.0.1:50051 --chain assistant-llm

Each target of the chain names its OpenAI-compatible endpoint in the label
base_url and its model in upstream_model.
"""
import argparse
import os
import sys

import httpx
from failoverd_client import AttemptOutcome, Client, failure_from_exception, failure_from_response


def chat(client: Client, http: httpx.Client, chain: str, prompt: str) -> str:
    def attempt(target, ctx):
        try:
            reply = http.post(f"{target.labels['base_url']}/chat/completions",
                              headers={"authorization": f"Bearer {os.environ.get('UPSTREAM_API_KEY', 'none')}"},
                              json={"model": target.upstream_model,
                                    "messages": [{"role": "user", "content": prompt}]})
        except httpx.HTTPError as e:  # refused, DNS, reset, TLS, timeout
            return AttemptOutcome(ok=False, failure=failure_from_exception(e))
        if reply.status_code >= 400:
            return AttemptOutcome(ok=False, failure=failure_from_response(reply.status_code, reply.headers,
                                                                          reply.content))
        return AttemptOutcome(ok=True, response=reply.json()["choices"][0]["message"]["content"],
                              latency=reply.elapsed.total_seconds())

    result = client.run(chain, attempt, timeout=60)
    for a in result.attempts:
        print(f"  {a.target}: {'ok' if a.ok else a.reason.name} -> {a.verdict.name}", file=sys.stderr)
    if not result.ok:
        raise RuntimeError(result.error)
    return f"{result.served_by}: {result.response}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--chain", default="assistant-llm")
    parser.add_argument("prompt", nargs="?", default="Say hello.")
    args = parser.parse_args()
    with Client(args.server, token=os.environ.get("FAILOVERD_TOKEN")) as client, httpx.Client(timeout=30) as http:
        print(chat(client, http, args.chain, args.prompt))


if __name__ == "__main__":
    main()
