package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/telemetry"
)

// otlpEndpointEnv are the variables that turn tracing on when --otlp-endpoint
// is not given; the exporter reads them (and OTEL_EXPORTER_OTLP_HEADERS and
// the rest of the OTLP settings) itself.
var otlpEndpointEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// tracingEndpoint is where spans go: the flag, else the first variable
// set; "" means tracing is off.
func tracingEndpoint(flag string) string {
	if flag != "" {
		return flag
	}
	for _, v := range otlpEndpointEnv {
		if e := os.Getenv(v); e != "" {
			return e
		}
	}
	return ""
}

// checkOTLPEndpoint refuses an --otlp-endpoint that is not an http(s) URL.
func checkOTLPEndpoint(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: --otlp-endpoint %q is not an http(s) URL (e.g. http://127.0.0.1:4318)", wire.ErrUsage, wire.Mask(raw))
	}
	return nil
}

// startTracing builds the OTLP/HTTP exporter and the relay's tracing hook.
// The exporter connects lazily: an unreachable collector costs dropped
// spans, never the relay. flush sends what is buffered and stops.
func startTracing(ctx context.Context, endpointFlag, brokerURL string, perWave bool) (hook *telemetry.Tracing, flush func(), err error) {
	var opts []otlptracehttp.Option
	if endpointFlag != "" {
		// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the signal's
		// path is appended (WithEndpointURL alone would post to "/").
		u, _ := url.Parse(endpointFlag) // checkOTLPEndpoint parsed it
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	// service.name defaults to outbox-relay; OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override it.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("outbox-relay")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	hook = telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, System: messagingSystem(brokerURL), PerEvent: !perWave})
	return hook, func() {
		fctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = tp.Shutdown(fctx)
	}, nil
}

// messagingSystem is the messaging.system of a --broker URL, in the
// semantic conventions' words where they have one.
func messagingSystem(brokerURL string) string {
	scheme, _, _ := strings.Cut(strings.ToLower(brokerURL), ":")
	switch scheme {
	case "nats", "tls":
		return "nats"
	case "amqp", "amqps":
		return "rabbitmq"
	case "rediss":
		return "redis"
	case "mqtts":
		return "mqtt"
	case "https":
		return "http"
	}
	return scheme
}
