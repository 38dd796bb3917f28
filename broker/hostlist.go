package broker

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/outbox-go/outbox/internal/redact"
)

// HostListSpec says how an adapter's URL lists its hosts, for
// ParseHostList and its error messages.
type HostListSpec struct {
	Adapter     string // error prefix, e.g. "kafkabroker"
	Scheme      string // e.g. "kafka"
	Host        string // what a host is, e.g. "broker address", "name server"
	Userinfo    string // what user:secret@ means, e.g. "user:password"
	Example     string // a host:port, e.g. "127.0.0.1:9092"
	RequirePort bool   // a host without ":port" is refused
}

// HostList is a URL of the form scheme://[user:secret@]host:port[,host:port…][?query]
// (Kafka seeds, RocketMQ name servers): several hosts, credentials on the
// first only, options in the query.
type HostList struct {
	Hosts        []string
	User, Secret string // from the first host's userinfo
	HasUser      bool   // the first host carries user:secret@
	Query        url.Values
}

// ParseHostList reads raw as spec describes; an empty raw is the one host
// spec.Example. Every error is one line naming what is wrong, with any
// secret masked.
func ParseHostList(raw string, spec HostListSpec) (HostList, error) {
	var hl HostList
	raw = strings.TrimSpace(raw)
	if raw == "" {
		hl.Hosts = []string{spec.Example}
		return hl, nil
	}
	query := ""
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw, query = raw[:i], raw[i+1:]
	}
	prefix := spec.Scheme + "://"
	for i, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if rest, ok := strings.CutPrefix(part, prefix); ok {
			part = rest
		} else if strings.Contains(part, "://") {
			return hl, fmt.Errorf("%s: %s %q: the scheme must be %s, e.g. %s%s", spec.Adapter, spec.Host, redact.URL(part), prefix, prefix, spec.Example)
		}
		part = strings.TrimSuffix(part, "/")
		if at := strings.LastIndexByte(part, '@'); at >= 0 {
			if i != 0 {
				return hl, fmt.Errorf("%s: only the first %s may carry %s@ (one set of credentials for all)", spec.Adapter, spec.Host, spec.Userinfo)
			}
			u, err := url.Parse(prefix + part)
			if err != nil || u.User == nil {
				return hl, fmt.Errorf("%s: the %s@ part of the URL is not valid; percent-encode reserved characters in the secret", spec.Adapter, spec.Userinfo)
			}
			hl.User = u.User.Username()
			hl.Secret, _ = u.User.Password()
			hl.HasUser = true
			part = part[at+1:]
		}
		if part == "" || strings.ContainsAny(part, "/ ") || spec.RequirePort && !strings.Contains(part, ":") {
			return hl, fmt.Errorf("%s: %s %q is not host:port, e.g. %s%s,%s", spec.Adapter, spec.Host, redact.URL(part), prefix, spec.Example, spec.Example)
		}
		hl.Hosts = append(hl.Hosts, part)
	}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return hl, fmt.Errorf("%s: the query string of the URL is malformed: %w", spec.Adapter, err)
		}
		hl.Query = q
	}
	return hl, nil
}
