// Package redact hides the secrets of connection strings in everything the
// outbox prints: URLs in logs and headers, and errors from drivers that may
// echo a connection string back.
//
// # What is a secret
//
// A secret is a value in one of these positions, whatever its content:
//
//   - the password of a URL's userinfo (postgres://user:SECRET@host);
//   - the whole userinfo when it has no colon and the scheme reads it as a
//     credential: nats, tls, ws and wss (nats.go sends it as the token) and
//     redis, rediss (a lone userinfo is the AUTH password of a server
//     without ACL users). For every other scheme (postgres, mysql, amqp,
//     kafka, mqtt, http, …) a lone userinfo is a user name and stays;
//   - the value of a query parameter or a keyword (host=… password=…) whose
//     name, lowercased and with '_', '-' and '.' removed, contains pass, pwd,
//     secret, token, credential, apikey, accesskey, privatekey or signature,
//     or is exactly sig, jwt, nkey or seed (password, sslpassword,
//     sasl_password, auth_token, client_secret, api_key, access_key,
//     X-Amz-Signature, …). Names ending in file or path are exempt
//     (passfile, token_file): they name where a secret is, not the secret;
//     so is key alone, which names an event's ordering key in outbox
//     messages (key=order-42);
//   - the password of a go-sql-driver/mysql DSN (user:SECRET@tcp(host)/db).
//
// A secret becomes [Mask]; every other byte of the input stays where it was,
// so a message or URL without a secret comes out unchanged, byte for byte.
// An empty secret (user:@host) is left as it is: there is nothing to hide.
//
// # Parsing, not substring replacement
//
// The positions are found by parsing, never by replacing the text of a
// known password wherever it occurs: a password "post" must not turn
// user=postgres into user=xxxxxgres, nor a password "1" touch 127.0.0.1.
// [Text] scans a message for three shapes and masks what stands in a
// secret position of each:
//
//   - URL-shaped substrings, from a scheme:// to the next blank, quote,
//     backtick or angle bracket (a URL ends early where the next scheme://
//     of a comma-separated list begins);
//   - name=value pairs; a value is quoted by ' or " (a backslash escapes
//     the next character, as libpq reads it) or runs to the next blank,
//     quote or backtick, and also to the next '&' when the name follows a
//     '?' or '&' (a URL query);
//   - go-sql-driver/mysql DSNs: user:password before @proto( or @/.
//
// # Passwords the URL syntax cannot hold
//
// pgx accepts a password with an unencoded '#' or '?' (it reads userinfo up
// to the first '@' before any '/', as libpq does), and people paste
// passwords with '@' or '/' too. A strict URL parser then splits in the
// wrong place and shows the password's tail as a host, port or path. Here
// the userinfo ends at the LAST '@' that is followed by a host and is not in
// the query, an '@' being in the query when a parameter's name= stands
// between it and the '?' before it (so ?application_name=me@box does not
// count). Failing that, libpq's rule applies (the first '@' if no '/' comes
// first), and failing that, when what precedes the first '/' or '?' cannot
// be a host list, the last '@' followed by a host. The prices: an '@' in
// the path (a database named a@b) makes what precedes it count as userinfo
// and be masked; and a password that looks like a port followed by a query
// (u:12/a?x=y@h) is read as one, so it is not masked. The fuzz targets stop
// at that second case, and at a password holding ",x://", which reads as
// the next URL of a comma-separated list.
//
// Drivers echo such a URL in forms that cannot be parsed back (nats.go:
// parse "nats://u:p": invalid port ":p"). [Text] therefore also takes the
// connection strings the caller passed: it parses them with the rules
// above, learns their secrets (as written and percent- or backslash-
// decoded), and masks an occurrence of one of them only where it stands as
// a whole value in a secret-shaped position: between ':' or "//" and '@'
// (userinfo), or right after '=' (optionally with a quote or blanks)
// followed by the end, a blank, '&' or a quote. An occurrence inside a
// longer word is never touched. What even this cannot find, a fragment of
// a password shown as a port or host, is prevented where the URL is
// opened: internal/wire refuses a URL whose userinfo the driver would read
// differently, and says to percent-encode the password.
//
// # Errors
//
// [Error] returns an error whose message is [Text] of the original's and
// which unwraps to the original, so errors.Is and errors.As still classify
// it. Only its Error() text is safe to print: a caller that digs out a
// wrapped error with errors.As and prints that must redact it again.
//
// # Logs
//
// [Handler] wraps a log/slog handler so that the message and every
// string, error, Stringer or (when its JSON form holds a secret) other
// attribute of each record passes through [Text] first.
package redact
