package httpmsg_test

import (
	"net/http"

	"github.com/outbox-go/outbox/inbox/httpmsg"
)

// A webhook receiver: verify the signature, read the event, answer 400 to
// what cannot be read (the relay buries it) and 5xx to what may succeed
// later (the relay retries).
func ExampleReadRequest() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw2KcLzFWcSGQ=" // from your secret store
	http.HandleFunc("POST /hooks/orders", func(w http.ResponseWriter, r *http.Request) {
		msg, err := httpmsg.ReadRequest(r, "orders", secret)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = msg // in.Handle(r.Context(), "points", msg, handler)
		w.WriteHeader(http.StatusNoContent)
	})
}
