// RUN: %PYTHON -m etc.tools.import_model lstm | filecheck %s --check-prefix=LSTM
// RUN: %PYTHON -m etc.tools.import_model gru | filecheck %s --check-prefix=GRU
// RUN: %PYTHON -m etc.tools.import_model decoder_lm | filecheck %s --check-prefix=EMBED
// Multi-result recurrent ops: `y, _ = rnn(x)` uses result 0.

// LSTM: %[[R:.+]]:3 = "aten.lstm_input"(%arg0, {{.*}}) {{.*}} -> (tensor<2x6x32xf32>, tensor<1x2x32xf32>, tensor<1x2x32xf32>)
// LSTM: "aten.select_int"(%[[R]]#0)

// GRU: %[[R:.+]]:2 = "aten.gru_input"(%arg0, {{.*}}) -> (tensor<1x5x24xf32>, tensor<1x1x24xf32>)
// GRU: "aten.linear"(%[[R]]#0,

// EMBED: func.func @forward(%arg0: tensor<1x12xi64>
// EMBED: "aten.embedding"({{.*}}%arg0{{.*}}) {{.*}} -> tensor<1x12x32xf32>
