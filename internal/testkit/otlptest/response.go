package otlptest

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// responseType is the collector's ExportTraceServiceResponse, declared field for field as
// opentelemetry/proto/collector/trace/v1/trace_service.proto has it and read and written by
// protobuf-go's dynamic messages: the collector's generated package imports gRPC, whose 70
// packages the tests would compile for two fields. Its full names are prefixed so that they
// never meet the generated ones in protobuf's registry.
var responseType = func() protoreflect.MessageType {
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name)}
		if msg != "" {
			f.TypeName = proto.String(msg)
		}
		return f
	}
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("otlptest/trace_service_response.proto"),
		Package: proto.String("otlptest.collector.trace.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("ExportTraceServiceResponse"), Field: []*descriptorpb.FieldDescriptorProto{
				field("partial_success", 1, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".otlptest.collector.trace.v1.ExportTracePartialSuccess"),
			}},
			{Name: proto.String("ExportTracePartialSuccess"), Field: []*descriptorpb.FieldDescriptorProto{
				field("rejected_spans", 1, descriptorpb.FieldDescriptorProto_TYPE_INT64, ""),
				field("error_message", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
			}},
		},
	}
	fd, err := protodesc.NewFile(file, nil)
	if err != nil {
		panic(fmt.Sprintf("otlptest: the response's descriptor: %v", err))
	}
	return dynamicpb.NewMessageType(fd.Messages().ByName("ExportTraceServiceResponse"))
}()

// ExportResponse is the protobuf body of a collector's answer to a trace export: empty for a
// full success, or a partial success rejecting some spans with a message.
func ExportResponse(rejected int64, message string) []byte {
	msg := responseType.New()
	if rejected != 0 || message != "" {
		fields := msg.Descriptor().Fields()
		partial := msg.Mutable(fields.ByNumber(1)).Message()
		pf := partial.Descriptor().Fields()
		partial.Set(pf.ByNumber(1), protoreflect.ValueOfInt64(rejected))
		partial.Set(pf.ByNumber(2), protoreflect.ValueOfString(message))
	}
	b, err := proto.Marshal(msg.Interface())
	if err != nil {
		panic(fmt.Sprintf("otlptest: encoding a response: %v", err))
	}
	return b
}

// ReadExportResponse reads a collector's answer as protobuf does: the partial success's
// rejected spans and message, or an error for bytes that are not that message.
func ReadExportResponse(b []byte) (rejected int64, message string, err error) {
	msg := responseType.New()
	if err := proto.Unmarshal(b, msg.Interface()); err != nil {
		return 0, "", err
	}
	partial := msg.Get(msg.Descriptor().Fields().ByNumber(1)).Message()
	pf := partial.Descriptor().Fields()
	return partial.Get(pf.ByNumber(1)).Int(), partial.Get(pf.ByNumber(2)).String(), nil
}
