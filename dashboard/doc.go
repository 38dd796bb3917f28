// Package dashboard is an http.Handler that shows how an outbox is doing
// and lets an operator act on its dead letters, in a browser, with no
// internet needed: the page, its script and its chart are embedded in the
// binary (no CDN, no build step).
//
// It shows the backlog and the delivery rate over the last half hour (a
// chart of samples it takes in the background, at a cost that does not grow
// with the backlog: store.BacklogReader and the relay's counters), the age
// of the oldest pending event, the number of dead events (counted up to
// store.DeadCap, shown as "≥ 10,000" beyond), the keys held by dead events (those of the
// first 50, read every 5 s or when the number of dead events changes), the
// relay and its health, and the dead letters with a preview of their
// payload and their last error.
//
// Three actions change state, each on one dead event or a chosen set:
//
//   - retry: the event goes back to NEW with its attempts reset
//     (Store.RequeueDead); the relay delivers it next, in its key's order.
//   - skip: the event is deleted for good (a Purge of that one id), so the
//     later events of its key, held behind it, flow again. The response
//     carries the whole event, and the dashboard logs its id, event id,
//     topic and key, so an operator who skipped by mistake can enqueue it
//     again. This is "bury and move on": the event is not delivered.
//   - purge: every dead event, or those of one topic or key, older than a
//     given age, is deleted (Store.Purge).
//
// Actions are POST requests that carry the token in an Authorization:
// Bearer header, compared in constant time; without it they are refused
// with 401. No cookie is ever set or read, so another site cannot make a
// browser act on the operator's behalf (CSRF), and the page's script is
// the only one allowed to run (a strict Content-Security-Policy). A
// dashboard without a token is read-only and says how to enable actions.
// Reading (GET) needs no token: bind the server to loopback (the CLI's
// default) or put it behind an authenticating proxy, because dead letters
// show payloads. It answers only requests addressed to an IP address,
// localhost or a name listed in Config.Hosts, so that a web page that
// rebinds its own name to 127.0.0.1 (DNS rebinding) cannot read it through
// the operator's browser.
//
// The page uses a small JSON API, under /api/ (errors are {"error": "…"},
// a 4xx for a bad request, 503 when the store failed; never a 500):
//
//	GET  overview                  samples, backlog, ETA, held keys, relay health
//	GET  dead?after=ID&limit=N&topic=T&key=K   dead events in id order (limit ≤ MaxPageSize)
//	GET  dead/ID                   one event, with its headers
//	POST dead/ID/retry             requeue it                               (token)
//	POST dead/ID/skip              delete it so its key moves on            (token)
//	POST purge {"older_than":"720h","topic":"…","key":"…"}  delete dead events (token)
//
// Payloads are user data: the API caps each preview, shows a payload that
// is not UTF-8 as hex, and the page puts every value into the document as
// text, never as markup.
package dashboard
