// Command courier runs courier: `courier dev` for everything in one process on an embedded
// stack, and `courier migrate`, `courier worker`, `courier gateway` against a Temporal cluster,
// PostgreSQL and NATS in production. `courier bench` measures it.
package main
