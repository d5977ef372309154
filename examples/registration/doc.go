// Command registration is courier's seed example: "user registered → grant a coupon and
// points", where each reward is granted exactly once per user even when a message arrives
// twice.
//
// It is one binary with several roles:
//
//	registration account   --db sqlite:/tmp/registration.db --http 127.0.0.1:8090
//	registration consumers --nats nats://127.0.0.1:4322 --db sqlite:/tmp/rewards.db
//	                       [--points-broker amqp://guest:guest@127.0.0.1:5672/] [--coupons-broker …]
//	registration coupon    …   (only the coupon consumer)
//	registration points    …   (only the points consumer)
//	registration all       --nats … --db sqlite:…   (account and both consumers in one process)
//	registration rewards   --db sqlite:/tmp/rewards.db   (print the granted coupons and points)
//
// The account service (account.go) is a producer with a transactional outbox: POST /register
// inserts the user row and one courier_outbox row per reward (topics coupons.user.registered
// and points.user.registered, key = user id) in ONE database transaction, so the events exist
// if and only if the user does. It never talks to a broker; courier relays each row to the
// broker its topic is routed to — one NATS for both, or (COURIER_ROUTES) points to RabbitMQ
// and coupons to NATS — with the header Courier-Message-Id = registration/<outbox id> (for a
// producer database registered as source "registration"), also the NATS Nats-Msg-Id and the
// AMQP message_id.
//
// The consumers (rewards.go, rabbit.go) read their reward's topic: from the REGISTRATION
// stream through durable pull consumers named coupon and points, or from a RabbitMQ quorum
// queue (registration.points) bound to courier's exchange. Delivery is at least once, so each
// handler makes its effect
// idempotent: in one transaction it records (consumer, message id) in processed_messages,
// whose primary key rejects a second copy, and only for a new message inserts the reward into
// a table with a unique user_id. The message is acknowledged only after that transaction
// commits; a failure rolls everything back and the message is redelivered after a delay.
//
// Flags fall back to environment variables: REGISTRATION_DB, NATS_URL, REGISTRATION_HTTP,
// REGISTRATION_POINTS_BROKER and REGISTRATION_COUPONS_BROKER.
// SIGINT or SIGTERM stops every role cleanly. See README.md for a walk-through with courier dev.
package main
