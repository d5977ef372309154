// A TypeScript producer written against the types openapi-typescript generates from
// gateway/openapi.yaml: it inserts an outbox record with an object payload, arms a timer and
// inserts a task, and reads each back. `make api-check` type-checks it (tsc --noEmit); it is
// never run. It fails to compile when a body the API takes or answers has no type, or when
// arbitrary JSON (payload, result) is not typed as any JSON value.
import type { paths } from "./api";

type Body<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  requestBody?: { content: { "application/json": infer B } };
}
  ? B
  : never;
type Answer<P extends keyof paths, M extends keyof paths[P], S extends number> = paths[P][M] extends {
  responses: { [K in S]: { content: { "application/json": infer R } } };
}
  ? R
  : never;

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch("http://127.0.0.1:8080" + path, {
    method,
    headers: { Authorization: "Bearer ck_example", "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return (await res.json()) as T;
}

export async function outbox(): Promise<number> {
  const insert: Body<"/v1/outbox", "post"> = {
    topic: "orders.created",
    key: "o-1",
    payload: { order: 1, lines: [{ sku: "A", qty: 2 }] },
  };
  const created = await call<Answer<"/v1/outbox", "post", 201>>("POST", "/v1/outbox", insert);
  const again = await call<Answer<"/v1/outbox/{id}", "get", 200>>("GET", `/v1/outbox/${created.id}`);
  const status: string = again.status;
  return status === "sent" ? again.id : 0;
}

export async function timer(): Promise<string> {
  const arm: Body<"/v1/timers", "post"> = {
    biz_type: "order-timeout",
    biz_id: "o-1",
    delay: "30m",
    payload: { order: 1 },
  };
  const created = await call<Answer<"/v1/timers", "post", 201>>("POST", "/v1/timers", arm);
  const existing = await call<Answer<"/v1/timers", "post", 200>>("POST", "/v1/timers", arm);
  const read = await call<Answer<"/v1/timers/{biz_type}/{biz_id}", "get", 200>>(
    "GET",
    `/v1/timers/${created.biz_type}/${existing.biz_id}`,
  );
  const cancelled = await call<Answer<"/v1/timers/{biz_type}/{biz_id}", "delete", 200>>(
    "DELETE",
    `/v1/timers/${read.biz_type}/${read.biz_id}`,
  );
  return cancelled.state;
}

export async function task(): Promise<string> {
  const insert: Body<"/v1/tasks", "post"> = {
    task_id: "doc-1",
    task_version: 1,
    priority: 2,
    payload: { document: "s3://bucket/doc-1.pdf" },
  };
  const created = await call<Answer<"/v1/tasks", "post", 201>>("POST", "/v1/tasks", insert);
  const read = await call<Answer<"/v1/tasks/{task_id}/versions/{version}", "get", 200>>(
    "GET",
    `/v1/tasks/${encodeURIComponent(created.task_id)}/versions/${created.task_version}`,
  );
  const result: unknown = read.result;
  return `${read.status} ${JSON.stringify(result)}`;
}
