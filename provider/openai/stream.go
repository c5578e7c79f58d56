package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/reins-run/reins/model"
)

// errTruncated is a stream that ended before the model finished its reply: the connection
// dropped, or the server closed it without saying why. Retrying can fix it.
var errTruncated = errors.New("the reply stream ended before the model finished its reply")

// errBadChunk is a stream chunk the SDK's accumulator refused (a different completion id, an
// impossible index): the reply cannot be put together.
var errBadChunk = errors.New("the reply stream sent a chunk that does not continue the reply")

// stream makes a streaming call, reports each text and tool-call fragment of the first choice to
// onDelta (when set) in arrival order, and returns the accumulated completion.
func (m *Model) stream(ctx context.Context, params openai.ChatCompletionNewParams, onDelta func(model.Delta), opts []option.RequestOption) (*openai.ChatCompletion, error) {
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	s := m.client.Chat.Completions.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	announced := map[int64]bool{} // tool-call indices whose first fragment was reported
	finished := false
	chunks := 0
	for s.Next() {
		chunks++
		chunk := s.Current()
		if chunk.ID == "" {
			chunk.ID = acc.ID // some servers leave the id out of later chunks (the usage chunk)
		}
		if !acc.AddChunk(chunk) {
			return nil, errBadChunk
		}
		for i := range chunk.Choices {
			ch := &chunk.Choices[i]
			if ch.Index != 0 {
				continue // only the first choice is read, as in a non-streaming reply
			}
			if ch.FinishReason != "" {
				finished = true
			}
			if onDelta == nil {
				continue
			}
			if ch.Delta.Content != "" {
				onDelta(model.Delta{Text: ch.Delta.Content})
			}
			for j := range ch.Delta.ToolCalls {
				tc := &ch.Delta.ToolCalls[j]
				index := max(tc.Index, 0) // some servers number a lone call -1; the accumulator takes it as 0
				d := model.Delta{CallIndex: int(index), Arguments: tc.Function.Arguments}
				if !announced[index] {
					announced[index] = true
					d.CallID, d.CallName = tc.ID, tc.Function.Name
				} else if d.Arguments == "" {
					continue // nothing new for the caller
				}
				onDelta(d)
			}
		}
	}
	if err := s.Err(); err != nil {
		var se *ssestream.StreamError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("the server reported an error in the middle of the reply stream: %s", streamErrorText(se))
		case chunks > 0:
			return nil, fmt.Errorf("the reply stream broke off after %d chunks: %w", chunks, err)
		}
		return nil, err
	}
	if !finished {
		return nil, errTruncated
	}
	return &acc.ChatCompletion, nil
}

// streamErrorText is the message of an error event ({"error": {"message": ...}}), else its data.
func streamErrorText(se *ssestream.StreamError) string {
	var ev struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(se.Event.Data, &ev) == nil && ev.Error.Message != "" {
		return shorten(ev.Error.Message)
	}
	return shorten(string(se.Event.Data))
}
