package natsbroker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsErrCodeStreamSubjectOverlap is nats-server's error code for a stream
// whose subjects overlap another stream's (JSStreamSubjectOverlapErr).
const jsErrCodeStreamSubjectOverlap jetstream.ErrorCode = 10065

// StreamSetup says what EnsureStream did.
type StreamSetup struct {
	Created bool     // the stream did not exist and was created
	Added   []string // subjects added to the existing stream, in the order given
}

// EnsureStream makes sure the JetStream stream name exists and captures
// every subject of subjects (NATS subjects, wildcards allowed, such as
// "orders" and "orders.>"), so that the relay's events on them are stored
// instead of going DEAD. A missing stream is created with file storage and
// the server's defaults (two-minute duplicate window); an existing one gets
// the subjects it lacks added, keeping the rest of its configuration. It is
// idempotent. The Broker itself never creates streams: which subjects are
// kept, and for how long, stays the operator's choice, made by calling this
// (or `outbox broker setup`) or with any other JetStream tool.
func EnsureStream(ctx context.Context, nc *nats.Conn, name string, subjects []string) (StreamSetup, error) {
	var res StreamSetup
	if len(subjects) == 0 {
		return res, errors.New("natsbroker: EnsureStream needs at least one subject")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return res, fmt.Errorf("natsbroker: %w", err)
	}
	s, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage})
		if err != nil {
			return res, streamError(ctx, js, name, subjects, err)
		}
		res.Created = true
		return res, nil
	case err != nil:
		return res, fmt.Errorf("natsbroker: stream %q: %w", name, err)
	}
	cfg := s.CachedInfo().Config
	for _, subj := range subjects {
		if !slices.Contains(cfg.Subjects, subj) && !slices.Contains(res.Added, subj) {
			res.Added = append(res.Added, subj)
		}
	}
	if len(res.Added) == 0 {
		return res, nil
	}
	cfg.Subjects = append(cfg.Subjects, res.Added...)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return StreamSetup{}, streamError(ctx, js, name, res.Added, err)
	}
	return res, nil
}

// streamError explains a refused create or update; for overlapping
// subjects it names the stream that already has them.
func streamError(ctx context.Context, js jetstream.JetStream, name string, subjects []string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamSubjectOverlap {
		for _, subj := range subjects {
			if other, lerr := js.StreamNameBySubject(ctx, subj); lerr == nil && other != name {
				return fmt.Errorf("natsbroker: stream %q: subject %q overlaps the subjects of stream %q: events on it are stored there already, or pick subjects that do not overlap (%w)", name, subj, other, err)
			}
		}
	}
	return fmt.Errorf("natsbroker: stream %q with subjects %q: %w", name, subjects, err)
}
