// Two values written at i64 positions (tensor.insert): the out-of-range
// position writes nothing.
func.func @insert_oob(%d: tensor<8xf32>, %i: tensor<2xi64>, %v: tensor<2xf32>) -> tensor<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %i0 = tensor.extract %i[%c0] : tensor<2xi64>
  %i1 = tensor.extract %i[%c1] : tensor<2xi64>
  %v0 = tensor.extract %v[%c0] : tensor<2xf32>
  %v1 = tensor.extract %v[%c1] : tensor<2xf32>
  %x0 = arith.index_cast %i0 : i64 to index
  %x1 = arith.index_cast %i1 : i64 to index
  %r0 = tensor.insert %v0 into %d[%x0] : tensor<8xf32>
  %r1 = tensor.insert %v1 into %r0[%x1] : tensor<8xf32>
  return %r1 : tensor<8xf32>
}
