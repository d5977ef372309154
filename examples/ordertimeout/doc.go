// Command ordertimeout is courier's timer example: "close this order in 30 minutes unless it
// is paid".
//
// It is one binary with two roles:
//
//	ordertimeout setup  --courier-url http://127.0.0.1:8080 --courier-key ADMIN_KEY
//	ordertimeout orders --db sqlite:/tmp/orders.db --http 127.0.0.1:8091 --secret whsec_…
//
// setup configures the business type order.close on courier's gateway (PUT
// /v1/biz-types/order.close: signed HTTP delivery to the orders service's callback) and prints
// the signing secret courier generated for it.
//
// orders is the order service (orders.go). POST /orders inserts the order and arms its
// close-order timer with outbox.ArmTimer in ONE database transaction: courier's relay reads
// the courier_outbox row and creates the timer only if that transaction committed, so there
// is never an order without its timer nor a timer without its order. Paying an order
// (POST /orders/{id}/pay) marks it paid and then cancels the timer through courier's API;
// POST /orders/{id}/extend reschedules it. When the timer fires, courier POSTs a signed
// callback to /callbacks/order-close (callback.go); the handler verifies the signature and
// closes the order only if it is still open, once per delivery id.
//
// Flags fall back to environment variables: ORDERS_DB, ORDERS_HTTP, ORDER_TIMEOUT,
// COURIER_URL, COURIER_API_KEY and ORDER_TIMER_SECRET. SIGINT or SIGTERM stops the service
// cleanly. See README.md for a walk-through with courier dev.
package main
