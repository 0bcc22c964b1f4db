// RUN: %PYTHON -m etc.tools.import_model %S/Inputs/models.py:WithCond | filecheck %s --check-prefix=COND
// RUN: %PYTHON -m etc.tools.import_model %S/Inputs/models.py:DoublingLoop | filecheck %s --check-prefix=LOOP
// RUN: %PYTHON -m etc.tools.import_model %S/Inputs/models.py:WithMap | filecheck %s --check-prefix=MAP
// RUN: %PYTHON -m etc.tools.import_model %S/Inputs/models.py:SizeCond | filecheck %s --check-prefix=SIZE
// torch.cond -> scf.if on the extracted bool predicate, each branch's graph inlined in its region;
// torch.while_loop -> scf.while whose condition forwards the carries, additional inputs read from above;
// map (and scan) -> scf.while over a counter: row i picked with index_select, written with index_put.

// COND-LABEL: func.func @forward(%arg0: tensor<3xf32>
// COND: %[[GT:.+]] = "aten.gt_scalar"
// COND: %[[P:.+]] = tensor.extract %[[GT]][] : tensor<i1> loc("cond"("{{.*}}models.py":27:9))
// COND: %[[R:.+]] = scf.if %[[P]] -> (tensor<3xf32>) {
// COND-NEXT: %[[T:.+]] = "aten.add_scalar"(%arg0)
// COND-NEXT: scf.yield %[[T]] : tensor<3xf32>
// COND-NEXT: } else {
// COND-NEXT: %[[F:.+]] = "aten.sub_scalar"(%arg0)
// COND-NEXT: scf.yield %[[F]] : tensor<3xf32>
// COND: return %[[R]] : tensor<3xf32>

// LOOP-LABEL: func.func @forward(%arg0: tensor<3xf32> {{.*}}, %arg1: tensor<f32>
// LOOP: %[[I0:.+]] = "aten.zeros"
// LOOP: %[[W:.+]]:2 = scf.while (%[[I:.+]] = %[[I0]], %[[Y:.+]] = %arg0) : (tensor<i64>, tensor<3xf32>) -> (tensor<i64>, tensor<3xf32>) {
// LOOP: %[[S:.+]] = "aten.sum"(%[[Y]])
// LOOP: %[[LT:.+]] = "aten.lt_tensor"(%[[S]], %arg1)
// LOOP: %[[P:.+]] = tensor.extract %[[LT]][] : tensor<i1>
// LOOP: scf.condition(%[[P]]) %[[I]], %[[Y]] : tensor<i64>, tensor<3xf32>
// LOOP: } do {
// LOOP: ^bb0(%[[BI:.+]]: tensor<i64> {{.*}}, %[[BY:.+]]: tensor<3xf32>
// LOOP: %[[NI:.+]] = "aten.add_scalar"(%[[BI]])
// LOOP: %[[NY:.+]] = "aten.mul_scalar"(%[[BY]])
// LOOP: scf.yield %[[NI]], %[[NY]] : tensor<i64>, tensor<3xf32>
// LOOP: return %[[W]]#0, %[[W]]#1 : tensor<i64>, tensor<3xf32>

// MAP-LABEL: func.func @forward(%arg0: tensor<2x3xf32>
// MAP: %[[I0:.+]] = "aten.full"() {{.*}}size = array<i64: 1>} : () -> tensor<1xi64>
// MAP: %[[Y0:.+]] = "aten.full"() {{.*}}size = array<i64: 2, 3>} : () -> tensor<2x3xf32>
// MAP: %[[W:.+]]:2 = scf.while (%[[I:.+]] = %[[I0]], %[[Y:.+]] = %[[Y0]])
// MAP: "aten.lt_scalar"(%[[I]]) {{.*}}other = 2 : i64
// MAP: } do {
// MAP: %[[ROW:.+]] = "aten.index_select"(%arg0, %[[BI:.+]]) {dim = 0 : i64} : (tensor<2x3xf32>, tensor<1xi64>) -> tensor<1x3xf32>
// MAP: %[[X:.+]] = "aten.view"(%[[ROW]]) {{.*}} -> tensor<3xf32>
// MAP: %[[F:.+]] = "aten.mul_scalar"(%[[X]])
// MAP: %[[FR:.+]] = "aten.view"(%[[F]]) {{.*}} -> tensor<1x3xf32>
// MAP: %[[NY:.+]] = "aten.index_put"(%[[BY:.+]], %[[BI]], %[[FR]]) {accumulate = false
// MAP: %[[NI:.+]] = "aten.add_scalar"(%[[BI]])
// MAP: scf.yield %[[NI]], %[[NY]]
// MAP: return %[[W]]#1 : tensor<2x3xf32>

// A size predicate: arith.cmpi on index, straight into scf.if; branch ops carry their upper bounds.
// SIZE-LABEL: func.func @forward(%arg0: tensor<?x4xf32>
// SIZE: %[[DIM:.+]] = tensor.dim %arg0, %{{.+}} : tensor<?x4xf32>
// SIZE: %[[P:.+]] = arith.cmpi sgt, %[[DIM]], %{{.+}} : index
// SIZE: scf.if %[[P]] -> (tensor<?x4xf32>) {
// SIZE-NEXT: "aten.mul_scalar"(%arg0) {etc.upper_bounds = array<i64: 8, 4>
