package api

import (
	"net/http"
	"testing"
)

// The OpenAPI checks, for the tests of package api_test: every answer a test of the routes
// reads can be held to the document (helpers_test.go's stack does so for each request).

// CheckResponse checks body, the answer of status to method path (a request's path or a
// route's pattern), against the OpenAPI document (checkResponse).
func CheckResponse(t testing.TB, method, path string, status int, body []byte) {
	t.Helper()
	checkResponse(t, loadOpenAPI(t), method, path, status, body)
}

// CheckAnswer is CheckResponse of an answer whose Content-Type must be one the document
// gives the response.
func CheckAnswer(t testing.TB, method, path string, status int, contentType string, body []byte) {
	t.Helper()
	if err := loadOpenAPI(t).checkResponse(method, path, status, contentType, body); err != nil {
		t.Errorf("%s %s → %d: %v\nbody: %s", method, path, status, err, oaClip(body))
	}
}

// CheckHTTPResponse checks resp against the OpenAPI document (checkHTTPResponse) and returns
// its body, which it read and closed.
func CheckHTTPResponse(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	return checkHTTPResponse(t, loadOpenAPI(t), resp)
}

// ParseSSE returns the event names and data of a text/event-stream's messages.
func ParseSSE(body []byte) (events []string, data [][]byte) {
	for _, m := range oaParseSSE(body) {
		events, data = append(events, m.event), append(data, m.data)
	}
	return events, data
}

// CheckSSEMessage checks the data of one message of a run's event stream against the schema
// the OpenAPI document gives its event name (x-sse-messages of GET /v1/runs/{id}/events).
func CheckSSEMessage(t testing.TB, event string, data []byte) {
	t.Helper()
	d := loadOpenAPI(t)
	op, err := d.operation("GET", "/v1/runs/{id}/events")
	if err == nil {
		ptr := op + "/responses/200/content/text~1event-stream/x-sse-messages/" + ptrEscape(event)
		if _, ok := d.pointer(ptr); !ok {
			t.Errorf("event stream: the message %q is not one of x-sse-messages", event)
			return
		}
		err = d.validate(ptr, data)
	}
	if err != nil {
		t.Errorf("event stream: message %s: %v\ndata: %s", event, err, oaClip(data))
	}
}
